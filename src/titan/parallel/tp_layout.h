#pragma once
// Graph mode's reading of the tensor-parallel plan (tp_styles.h): which dim of each parameter the
// plan splits over tp, by the parameter's name in the model, and Megatron's layout of the
// activations at the regions' edges as forward hooks that hold them so (ops::keep_layout): a
// column-wise output split along its features, what enters a split region whole on every tp
// device, the logits split over the vocabulary (whole without loss parallelism). Under sequence
// parallelism a row-wise output, the embedding's output and a replicated region's output split
// along the sequence, as the residual stream between blocks does (graph_sharding's carry); without
// it they are whole. Nothing is narrowed; the compiled step's shardings carry the split and XLA's
// partitioner inserts the collectives (all-gathers and reduce-scatters under sequence
// parallelism, all-reduces without). The hooks stay while the layout lives.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/parallel/tp_styles.h"

namespace titan::parallel {

class TpLayout final : public TpStyles {
 public:
  explicit TpLayout(int64_t degree, TensorParallelOptions options = {});
  ~TpLayout() override;
  TpLayout(const TpLayout&) = delete;
  TpLayout& operator=(const TpLayout&) = delete;

  int64_t degree() const override { return degree_; }
  void colwise(nn::Linear& linear) override;
  void rowwise(nn::Linear& linear) override;
  void vocab_embedding(nn::Embedding& embedding) override;
  void vocab_output(nn::Linear& output) override;
  void tied_vocab_output(nn::Embedding&) override {}
  void enter_split_region(nn::Module& m) override;
  void norm(nn::Module&) override {}
  void partial_grads(nn::Module&) override {}
  void replicated_region(nn::Module& in, nn::Module& m) override;
  const TensorParallelOptions& options() const { return options_; }

  // The dim of parameter `name` split over tp; nullopt for a replicated one.
  std::optional<int64_t> split_dim(const std::string& name) const;
  const std::map<std::string, int64_t>& splits() const { return splits_; }

 private:
  // Records that `m`'s parameter `local` splits along `dim`, which must divide by the degree.
  void split(const nn::Module& m, const std::string& local, const Tensor& p, int64_t dim);

  // Holds m's output split along its features (its last dim), its sequence (dim 1), or whole.
  enum class Keep { features, sequence, whole };
  void keep_output(nn::Module& m, Keep keep);
  // A region's output between blocks: split along the sequence under sequence parallelism.
  Keep between_blocks() const { return options_.sequence_parallel ? Keep::sequence : Keep::whole; }

  int64_t degree_;
  TensorParallelOptions options_;
  std::map<std::string, int64_t> splits_;
  std::vector<std::pair<nn::Module*, uint64_t>> hooks_;
};

}  // namespace titan::parallel
