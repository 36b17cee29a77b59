#pragma once
// Tensor parallelism (Megatron-LM's plan) over the mesh's tp ranks, with sequence parallelism
// and a vocabulary-parallel loss, applied to a built model from outside its code.
//
// Each style below narrows parameters in place to this rank's slice (the handle keeps its
// TensorImpl, as module.h asks, with the local shape) and installs forward hooks or wrappers
// that put the collectives at the edges of the split regions:
//
//   colwise(linear)        weight [out, in] split on out: this rank computes its output features
//   rowwise(linear)        weight split on in: each rank's output is a partial sum, reduced over
//                          tp (Megatron's g), or with sequence parallelism reduce-scattered over
//                          the sequence; a bias, replicated, is added once after the reduction
//   vocab_embedding(emb)   rows split over the vocabulary: ids outside this rank's range look up
//                          zeros, and the partial rows are reduced (or reduce-scattered) as rowwise
//   enter_split_region(m)  m's output feeds split work: identity forward with the gradient summed
//                          over tp (Megatron's f), or with sequence parallelism gathered over the
//                          sequence (the gradient reduce-scattered back)
//   vocab_output(linear)   the output projection split over the vocabulary, like colwise; the
//                          logits stay split for loss() unless the loss is not parallel, in which
//                          case the model's output (the logits) is gathered
//   norm(m)                a norm between regions: replicated weights; with sequence parallelism
//                          each rank normalises its own tokens, so its gradient is partial
//   partial_grads(m)       replicated weights applied to split data (QK-norm over local heads)
//   replicated_region(in, m)  m runs whole on every rank (MoE experts are replicated across tp);
//                          with sequence parallelism in's output is gathered over the sequence
//                          and m's output split again, the gradients sliced and gathered
//
// Sequence parallelism splits the residual stream between blocks on dim 1 (tokens [B, S, D]), so
// seq_len must divide by tp. Local head counts follow from the narrowed weights; the model code
// does not change.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "titan/dist/process_group.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/parallel/parameter_slices.h"
#include "titan/parallel/tp_styles.h"

namespace titan::parallel {

// Where this rank's slice of a parameter sits in the whole one.
struct TpPlacement {
  int64_t dim = -1;  // the split dim; -1: replicated on every tp rank
  int64_t offset = 0;
  Shape global_shape;
  // Replicated, but each rank's gradient holds only its part of the whole: summed over tp.
  bool partial_grad = false;
};

class TensorParallel final : public ParameterSlices, public TpStyles {
 public:
  // `root` is the model: its output (the logits) is gathered when the loss is not parallel.
  TensorParallel(nn::Module& root, dist::ProcessGroup group, TensorParallelOptions options = {});
  ~TensorParallel() override;
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  int64_t degree() const override { return group_.size(); }
  void colwise(nn::Linear& linear) override;
  void rowwise(nn::Linear& linear) override;
  void vocab_embedding(nn::Embedding& embedding) override;
  void vocab_output(nn::Linear& output) override;
  // For an output projection that reuses the embedding's weight (tied): the embedding's style
  // already split it; only the loss needs to know.
  void tied_vocab_output(nn::Embedding& embedding) override;
  void enter_split_region(nn::Module& m) override;
  void norm(nn::Module& m) override;
  void partial_grads(nn::Module& m) override;
  void replicated_region(nn::Module& in, nn::Module& m) override;

  // The training loss of the model's logits: vocab_parallel_cross_entropy over the split
  // vocabulary, or ops::cross_entropy when the logits were gathered.
  Tensor loss(const Tensor& logits, const Tensor& labels) const;

  // After the step's backward (and FSDP's reduction): sums over tp the gradients of the
  // parameters named partial, among `named` (the optimizer's tensors by parameter name).
  void reduce_partial_gradients(const std::vector<std::pair<std::string, Tensor>>& named);
  // Which of `named` count towards this rank's share of the gradient norm: split ones always,
  // replicated ones on tp rank 0 only (the others hold copies).
  std::vector<Tensor> norm_params(const std::vector<std::pair<std::string, Tensor>>& named) const;

  // The placement of the parameter named `name`, nullopt for one that no style touched
  // (replicated with whole gradients).
  std::optional<TpPlacement> placement(const std::string& name) const;
  // The same as deferred initialisation reads it (parallel/deferred_init.h): the box of the whole
  // tensor that this rank's slice is, nullopt for a replicated parameter.
  std::optional<GlobalSlice> slice_of(const std::string& name) const override;
  const dist::ProcessGroup& slice_group() const override { return group_; }
  dist::ProcessGroup& group() { return group_; }
  const TensorParallelOptions& options() const { return options_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  void split_parameter(nn::Module& m, const std::string& name, const Tensor& p, int64_t dim);
  // Replicated with partial gradients: m's parameter `local`, or every one of m's.
  void mark_partial(nn::Module& m, const std::string& local, const Tensor& p);
  void mark_partial(nn::Module& m);
  // Without the parallel loss, the model's output (the logits) is gathered over the vocabulary.
  void gather_logits_unless_loss_parallel();
  uint64_t hook(nn::Module& m, nn::Module::ForwardHook h);

  nn::Module& root_;
  dist::ProcessGroup group_;
  TensorParallelOptions options_;
  std::map<std::string, TpPlacement> placements_;
  std::vector<std::pair<nn::Module*, uint64_t>> hooks_;
  std::vector<nn::Module*> wrapped_;
  int64_t vocab_size_ = 0;
  int64_t vocab_offset_ = 0;
  bool gather_logits_ = false;
};

}  // namespace titan::parallel
