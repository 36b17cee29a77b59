#include "titan/models/clip/model_args.h"

#include "titan/core/error.h"

namespace titan::models::clip {

void ModelArgs::validate() const {
  TITAN_CHECK(vocab_size > 0 && dim > 0 && ffn_dim > 0 && n_layers > 0 && n_heads > 0 && max_positions > 0,
              "clip ModelArgs: vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
              "num_attention_heads and max_position_embeddings must be positive, got ",
              vocab_size, ", ", dim, ", ", ffn_dim, ", ", n_layers, ", ", n_heads, " and ", max_positions);
  TITAN_CHECK(dim % n_heads == 0, "clip ModelArgs: num_attention_heads (", n_heads,
              ") must divide hidden_size (", dim, ")");
  TITAN_CHECK(activation == common::Activation::quick_gelu || activation == common::Activation::gelu,
              "clip ModelArgs: the activation must be quick_gelu or gelu");
  TITAN_CHECK(norm_eps >= 0, "clip ModelArgs: layer_norm_eps must not be negative, got ", norm_eps);
}

double ModelArgs::forward_matmul_flops(int64_t seq) const {
  const auto s = static_cast<double>(seq), d = static_cast<double>(dim);
  const double projections = 4 * s * d * d, attention = 2 * s * s * d,
               mlp = 2 * s * d * static_cast<double>(ffn_dim);
  return 2 * static_cast<double>(n_layers) * (projections + attention + mlp);
}

std::vector<std::string> flavor_names() {
  return {"vit-large-patch14"};
}

ModelArgs flavor(const std::string& name) {
  TITAN_CHECK(name == "vit-large-patch14", "clip: unknown flavor '", name,
              "'; choose one of: vit-large-patch14");
  return ModelArgs{};
}

}  // namespace titan::models::clip
