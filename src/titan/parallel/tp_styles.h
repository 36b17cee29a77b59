#pragma once
// Megatron's tensor-parallel plan as a model states it (models/*/parallelize), apart from what
// carries it out: eager mode's TensorParallel narrows the parameters and installs collectives;
// graph mode's TpLayout only records which dim of which parameter the plan splits, and XLA's
// partitioner inserts the collectives. One plan serves both modes. The styles are documented on
// TensorParallel (tensor_parallel.h).
#include <cstdint>

#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"

namespace titan::parallel {

// Megatron's choices beside the plan, for both modes: sequence parallelism (between the split
// regions the activations split along the sequence: the norms run on a slice of the tokens, and a
// row-wise output is reduce-scattered instead of all-reduced), and loss parallelism (the logits
// stay split over the vocabulary into the loss).
struct TensorParallelOptions {
  bool sequence_parallel = true;
  bool loss_parallel = true;
};

class TpStyles {
 public:
  virtual ~TpStyles() = default;
  // The tp degree the plan splits into.
  virtual int64_t degree() const = 0;
  virtual void colwise(nn::Linear& linear) = 0;
  virtual void rowwise(nn::Linear& linear) = 0;
  virtual void vocab_embedding(nn::Embedding& embedding) = 0;
  virtual void vocab_output(nn::Linear& output) = 0;
  virtual void tied_vocab_output(nn::Embedding& embedding) = 0;
  virtual void enter_split_region(nn::Module& m) = 0;
  virtual void norm(nn::Module& m) = 0;
  virtual void partial_grads(nn::Module& m) = 0;
  virtual void replicated_region(nn::Module& in, nn::Module& m) = 0;
};

}  // namespace titan::parallel
