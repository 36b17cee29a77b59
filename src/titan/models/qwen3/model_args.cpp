#include "titan/models/qwen3/model_args.h"

#include <map>
#include <tuple>

#include "titan/core/error.h"
#include "titan/models/common/size_limits.h"

namespace titan::models::qwen3 {

void ModelArgs::validate() const {
  using namespace common;
  const std::string family = "qwen3 ModelArgs";
  for (const auto& [key, value, max] :
       {std::tuple{"dim", dim, kMaxWidth}, std::tuple{"n_layers", n_layers, kMaxCount},
        std::tuple{"n_heads", n_heads, kMaxCount}, std::tuple{"n_kv_heads", n_kv_heads, kMaxCount},
        std::tuple{"head_dim", head_dim, kMaxWidth}, std::tuple{"ffn_dim", ffn_dim, kMaxWidth},
        std::tuple{"vocab_size", vocab_size, kMaxVocab}, std::tuple{"max_seq_len", max_seq_len, kMaxSeqLen}})
    check_size(family, key, value, max);
  if (moe) {
    check_size(family, "moe.num_experts", moe->num_experts, kMaxCount);
    check_size(family, "moe.hidden_dim", moe->hidden_dim, kMaxWidth);
  }
  TITAN_CHECK(head_dim > 0 && head_dim % 2 == 0,
              "qwen3 ModelArgs: head_dim must be positive and even (RoPE "
              "rotates pairs), got ",
              head_dim);
  TITAN_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "qwen3 ModelArgs: n_heads (", n_heads,
              ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  TITAN_CHECK(norm_eps >= 0 && rope_theta > 0,
              "qwen3 ModelArgs: expected norm_eps >= 0 and rope_theta > 0, got ", norm_eps, " and ",
              rope_theta);
  TITAN_CHECK(aux_loss_coeff >= 0, "qwen3 ModelArgs: aux_loss_coeff must be >= 0, got ", aux_loss_coeff);
  if (moe) moe->validate();
}

namespace {

// Renormalised top-k, as every Qwen 3 MoE config has it; the balancing options come from the job.
nn::moe::MoEArgs moe_args(int64_t num_experts, int64_t top_k, int64_t hidden_dim) {
  nn::moe::MoEArgs m;
  m.num_experts = num_experts;
  m.top_k = top_k;
  m.hidden_dim = hidden_dim;
  m.norm_topk_prob = true;
  return m;
}

ModelArgs dense(int64_t dim, int64_t n_layers, int64_t n_heads, int64_t ffn_dim, bool tie) {
  ModelArgs a;
  a.dim = dim;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = 8;
  a.ffn_dim = ffn_dim;
  a.tie_embeddings = tie;
  return a;
}

// Qwen3-30B-A3B and Qwen3-235B-A22B: 4 kv heads, 128 experts of which 8 per token, renormalised.
// intermediate_size (6144, 12288) is the dense size of mlp_only_layers, of which there are none.
ModelArgs sparse(int64_t dim, int64_t n_layers, int64_t n_heads, int64_t ffn_dim, int64_t moe_hidden) {
  ModelArgs a = dense(dim, n_layers, n_heads, ffn_dim, false);
  a.n_kv_heads = 4;
  a.moe = moe_args(128, 8, moe_hidden);
  return a;
}

// Small enough to train in seconds on a laptop CPU; head_dim differs from dim / n_heads, as in
// every released size, so that the independence is exercised.
ModelArgs debug(bool moe) {
  ModelArgs a;
  a.dim = 256;
  a.n_layers = moe ? 4 : 6;
  a.n_heads = 8;
  a.n_kv_heads = 4;
  a.head_dim = 64;
  a.ffn_dim = 768;
  a.vocab_size = 2048;
  if (moe) a.moe = moe_args(8, 2, 256);
  return a;
}

// Qwen's config.json of each released size: 151936-token vocabulary, head_dim 128, rms eps 1e-6,
// rope_theta 1e6, 40960 positions; the three smallest tie their embeddings.
const std::map<std::string, ModelArgs>& flavors(Family family) {
  static const std::map<std::string, ModelArgs> dense_table = {
      {"debugmodel", debug(false)},
      {"0.6B", dense(1024, 28, 16, 3072, true)},
      {"1.7B", dense(2048, 28, 16, 6144, true)},
      {"4B", dense(2560, 36, 32, 9728, true)},
      {"8B", dense(4096, 36, 32, 12288, false)},
      {"14B", dense(5120, 40, 40, 17408, false)},
      {"32B", dense(5120, 64, 64, 25600, false)},
  };
  static const std::map<std::string, ModelArgs> moe_table = {
      {"debugmodel", debug(true)},
      {"30B-A3B", sparse(2048, 48, 32, 6144, 768)},
      {"235B-A22B", sparse(4096, 94, 64, 12288, 1536)},
  };
  return family == Family::dense ? dense_table : moe_table;
}

}  // namespace

const char* family_name(Family family) {
  return family == Family::dense ? "qwen3" : "qwen3_moe";
}

std::vector<std::string> flavor_names(Family family) {
  // Smallest first, not the map's alphabetical order.
  if (family == Family::dense) return {"debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B"};
  return {"debugmodel", "30B-A3B", "235B-A22B"};
}

ModelArgs flavor(Family family, const std::string& name) {
  auto it = flavors(family).find(name);
  if (it == flavors(family).end()) {
    std::string known;
    for (const std::string& n : flavor_names(family)) known += (known.empty() ? "" : ", ") + n;
    TITAN_CHECK(false, family_name(family), ": unknown flavor '", name, "'; choose one of: ", known,
                family == Family::dense ? " (mixture-of-experts flavors are model.name = \"qwen3_moe\")"
                                        : " (dense flavors are model.name = \"qwen3\")");
  }
  return it->second;
}

ModelSummary summarize(const ModelArgs& a, int64_t seq_len) {
  a.validate();
  TITAN_CHECK(seq_len > 0, "qwen3 summarize: seq_len must be positive, got ", seq_len);
  const int64_t q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
  const int64_t attention = a.dim * q_dim + 2 * a.dim * kv_dim + q_dim * a.dim + 2 * a.head_dim;
  int64_t ffn = 3 * a.dim * a.ffn_dim, ffn_active = ffn;
  if (a.moe) {
    const int64_t expert = 3 * a.dim * a.moe->hidden_dim, router = a.dim * a.moe->num_experts;
    ffn = a.moe->num_experts * expert + router;
    ffn_active = a.moe->top_k * expert + router;
  }
  const int64_t norms = 2 * a.dim, embedding = a.vocab_size * a.dim;
  const int64_t output = a.tie_embeddings ? 0 : embedding;
  ModelSummary s;
  s.n_layers = a.n_layers;
  s.n_heads = a.n_heads;
  s.n_kv_heads = a.n_kv_heads;
  s.ffn_hidden_dim = a.moe ? 0 : a.ffn_dim;
  s.num_experts = a.moe ? a.moe->num_experts : 0;
  s.vocab_size = a.vocab_size;
  s.num_embedding_params = embedding;
  s.num_params = embedding + a.n_layers * (attention + ffn + norms) + a.dim + output;
  // Every matmul a token goes through, the output projection included even when it is the
  // embedding; the experts it is not routed to cost it nothing.
  const int64_t active_matmul = a.n_layers * (attention + ffn_active + norms) + a.dim + embedding;
  s.flops_per_token = 6.0 * static_cast<double>(active_matmul) + 12.0 * static_cast<double>(a.n_layers) *
                                                                     static_cast<double>(q_dim) *
                                                                     static_cast<double>(seq_len);
  const int64_t active = active_matmul + (a.tie_embeddings ? 0 : embedding);
  s.description = "dim " + std::to_string(a.dim) + ", " + std::to_string(a.n_layers) + " layers, " +
                  std::to_string(a.n_heads) + " heads (" + std::to_string(a.n_kv_heads) + " kv), head_dim " +
                  std::to_string(a.head_dim) + ", " +
                  (a.moe ? std::to_string(a.moe->num_experts) + " experts (top " +
                               std::to_string(a.moe->top_k) + ") of ffn " + std::to_string(a.moe->hidden_dim)
                         : "ffn " + std::to_string(a.ffn_dim)) +
                  ", vocab " + std::to_string(a.vocab_size) + (a.tie_embeddings ? " (tied)" : "") + "; " +
                  fmt_count(static_cast<double>(s.num_params)) + " parameters" +
                  (a.moe ? ", " + fmt_count(static_cast<double>(active)) + " active" : "");
  return s;
}

}  // namespace titan::models::qwen3
