#pragma once
// Qwen 3 hyperparameters as the published config.json files give them (Qwen3ForCausalLM and
// Qwen3MoeForCausalLM), and the sizes they imply without building anything.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "titan/models/model_summary.h"
#include "titan/nn/moe/moe.h"

namespace titan::models::qwen3 {

struct ModelArgs {
  int64_t dim = 1024;
  int64_t n_layers = 28;
  int64_t n_heads = 16;
  int64_t n_kv_heads = 8;
  int64_t head_dim = 128;  // its own size, not dim / n_heads
  int64_t ffn_dim = 3072;  // the dense SwiGLU hidden size (unused when every block is MoE)
  int64_t vocab_size = 151936;
  double norm_eps = 1e-6;  // every RMSNorm, the QK-norms included
  double rope_theta = 1000000;
  int64_t max_seq_len = 40960;  // positions the RoPE table covers
  bool tie_embeddings = false;  // the output projection is the token embedding
  // Set: every block's feed-forward is a mixture of experts (Qwen 3 MoE has no dense blocks).
  std::optional<nn::moe::MoEArgs> moe;
  // The MoE load-balancing loss's coefficient: 0 computes none.
  double aux_loss_coeff = 0.001;
  // Which loss it weighs: the mean over layers of each layer's, or one over all layers' tokens
  // (transformers'); see nn/moe/load_balance.h.
  nn::moe::LoadBalanceLoss load_balance_loss = nn::moe::LoadBalanceLoss::per_layer;

  // Throws, naming the field, when the sizes cannot make a model (heads not grouping, ...).
  void validate() const;
};

// The two registry families: "qwen3" (dense) and "qwen3_moe", as Hugging Face's model_type.
enum class Family { dense, moe };
// Its name there (model.name), which is also its model_type; a Family prints as it.
const char* family_name(Family family);
inline std::ostream& operator<<(std::ostream& os, Family family) {
  return os << family_name(family);
}

// Dense: "debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B".
// MoE: "debugmodel", "30B-A3B", "235B-A22B". An unknown name is an error listing the family's.
ModelArgs flavor(Family family, const std::string& name);
std::vector<std::string> flavor_names(Family family);

// Parameter count and training FLOPs per token at `seq_len`; for MoE the FLOPs count the
// parameters a token uses (its k experts and the router), not all of them.
ModelSummary summarize(const ModelArgs& args, int64_t seq_len);

}  // namespace titan::models::qwen3
