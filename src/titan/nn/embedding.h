#pragma once
#include "titan/nn/module.h"

namespace titan::nn {

// A lookup table: ids (i32/i64, any shape) -> rows of weight [num_embeddings, dim].
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions opts = {});

  Tensor forward(const Tensor& ids) const;
  // Through run_forward(ids, body), so that a plan can change how the lookup runs (a table split
  // over the vocabulary looks up only its own rows).
  Tensor operator()(const Tensor& ids) {
    return run_forward(ids, [this](const Tensor& in) { return forward(in); });
  }

  // Normal(0, 1): PyTorch's default and TorchTitan's Llama token-embedding init alike.
  void reset_parameters(Generator& gen) override;

  int64_t num_embeddings() const { return weight.size(0); }
  int64_t embedding_dim() const { return weight.size(1); }

  Tensor weight;  // [num_embeddings, dim]
};

}  // namespace titan::nn
