#include "titan/models/t5/model_args.h"

#include "titan/core/error.h"

namespace titan::models::t5 {

void ModelArgs::validate() const {
  TITAN_CHECK(
      vocab_size > 0 && d_model > 0 && d_kv > 0 && d_ff > 0 && n_layers > 0 && n_heads > 0,
      "t5 ModelArgs: vocab_size, d_model, d_kv, d_ff, num_layers and num_heads must be positive, got ",
      vocab_size, ", ", d_model, ", ", d_kv, ", ", d_ff, ", ", n_layers, " and ", n_heads);
  // The bidirectional buckets split in two halves, each with an exact part of half its buckets
  // (at least one) and a logarithmic part from there to max_distance (a range that is not empty).
  TITAN_CHECK(num_buckets >= 4 && max_distance > num_buckets / 2 / 2,
              "t5 ModelArgs: relative_attention_num_buckets must be at least 4 and "
              "relative_attention_max_distance above a quarter of it, got ",
              num_buckets, " and ", max_distance);
  TITAN_CHECK(norm_eps >= 0, "t5 ModelArgs: layer_norm_epsilon must not be negative, got ", norm_eps);
}

double ModelArgs::forward_matmul_flops(int64_t seq) const {
  const auto s = static_cast<double>(seq), d = static_cast<double>(d_model),
             inner = static_cast<double>(inner_dim());
  const double projections = 4 * s * d * inner, attention = 2 * s * s * inner,
               feed_forward = 3 * s * d * static_cast<double>(d_ff);
  return 2 * static_cast<double>(n_layers) * (projections + attention + feed_forward);
}

std::vector<std::string> flavor_names() {
  return {"xxl"};
}

ModelArgs flavor(const std::string& name) {
  TITAN_CHECK(name == "xxl", "t5: unknown flavor '", name, "'; choose one of: xxl");
  return ModelArgs{};
}

}  // namespace titan::models::t5
