#include "titan/nn/embedding.h"

#include "titan/nn/init.h"
#include "titan/ops/embedding.h"

namespace titan::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions opts) {
  TITAN_CHECK(num_embeddings > 0 && embedding_dim > 0, "nn::Embedding: sizes must be positive, got ",
              num_embeddings, " x ", embedding_dim);
  weight = register_parameter("weight", Tensor::zeros({num_embeddings, embedding_dim}, opts));
}

Tensor Embedding::forward(const Tensor& ids) const {
  return ops::embedding(ids, weight);
}

void Embedding::reset_parameters(Generator& gen) {
  init::normal_(weight, 0.0, 1.0, gen);
}

}  // namespace titan::nn
