#pragma once
// Llama 3 hyperparameters as Meta's params.json and TorchTitan's flavors give them, and the sizes
// they imply (parameter and FLOP counts) without building anything.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/models/model_summary.h"
#include "titan/ops/rope.h"

namespace titan::models::llama3 {

struct ModelArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 8;
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;  // the SwiGLU hidden size is rounded up to a multiple of this
  std::optional<double> ffn_dim_multiplier;
  int64_t ffn_dim = 0;  // the SwiGLU hidden size as given; 0: from Meta's rule below
  double norm_eps = 1e-5;
  double rope_theta = 500000;
  bool use_scaled_rope = true;  // Llama 3.1 long-context frequency scaling
  ops::RopeScaling rope_scaling;
  int64_t max_seq_len = 131072;  // positions the RoPE table covers

  int64_t head_dim() const { return dim / n_heads; }
  // ffn_dim when set, else Meta's rule: two thirds of 4 * dim, times ffn_dim_multiplier, rounded
  // up to multiple_of.
  int64_t ffn_hidden_dim() const;
  std::optional<ops::RopeScaling> rope_scaling_if_used() const {
    return use_scaled_rope ? std::optional(rope_scaling) : std::nullopt;
  }
  // Throws, naming the field, when the sizes cannot make a model (heads not dividing dim, ...).
  void validate() const;
};

// "debugmodel", "1B", "3B", "8B", "70B", "405B". An unknown name is an error listing these.
ModelArgs flavor(const std::string& name);
std::vector<std::string> flavor_names();

// Parameter count and training FLOPs per token at `seq_len`, from the args alone.
ModelSummary summarize(const ModelArgs& args, int64_t seq_len);

}  // namespace titan::models::llama3
