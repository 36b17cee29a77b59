#include "titan/models/llama3/model_args.h"

#include <map>
#include <tuple>

#include "titan/core/error.h"
#include "titan/models/common/size_limits.h"

namespace titan::models::llama3 {

int64_t ModelArgs::ffn_hidden_dim() const {
  if (ffn_dim > 0) return ffn_dim;
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

void ModelArgs::validate() const {
  using namespace common;
  const std::string family = "llama3 ModelArgs";
  for (const auto& [key, value, max] :
       {std::tuple{"dim", dim, kMaxWidth}, std::tuple{"n_layers", n_layers, kMaxCount},
        std::tuple{"n_heads", n_heads, kMaxCount}, std::tuple{"n_kv_heads", n_kv_heads, kMaxCount},
        std::tuple{"vocab_size", vocab_size, kMaxVocab}, std::tuple{"multiple_of", multiple_of, kMaxWidth},
        std::tuple{"max_seq_len", max_seq_len, kMaxSeqLen}})
    check_size(family, key, value, max);
  TITAN_CHECK(ffn_dim >= 0, "llama3 ModelArgs: ffn_dim must be 0 (from multiple_of) or positive, got ",
              ffn_dim);
  if (ffn_dim != 0) check_size(family, "ffn_dim", ffn_dim, kMaxWidth);
  TITAN_CHECK(dim % n_heads == 0 && head_dim() % 2 == 0, "llama3 ModelArgs: dim (", dim,
              ") must split into n_heads (", n_heads,
              ") heads of even size (RoPE rotates pairs); got head_dim ", dim / n_heads, " with remainder ",
              dim % n_heads);
  TITAN_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "llama3 ModelArgs: n_heads (", n_heads,
              ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  TITAN_CHECK(!ffn_dim_multiplier || *ffn_dim_multiplier > 0,
              "llama3 ModelArgs: ffn_dim_multiplier must be positive, got ", ffn_dim_multiplier.value_or(0));
  // Checked in floating point, before ffn_hidden_dim() converts it to an integer.
  const double multiplied = 8.0 * static_cast<double>(dim) / 3 * ffn_dim_multiplier.value_or(1.0);
  TITAN_CHECK(ffn_dim != 0 || multiplied <= static_cast<double>(kMaxWidth - multiple_of), family,
              ": the SwiGLU hidden size 8 * dim / 3 * ffn_dim_multiplier (", dim, ", ",
              ffn_dim_multiplier.value_or(1.0), ") is ", multiplied, ", past the limit ", kMaxWidth,
              "; lower ffn_dim_multiplier");
  TITAN_CHECK(norm_eps >= 0 && rope_theta > 0,
              "llama3 ModelArgs: expected norm_eps >= 0 and rope_theta > 0, got ", norm_eps, " and ",
              rope_theta);
}

namespace {

// Meta's params.json for each released size (Llama 3.1: 8B, 70B, 405B; Llama 3.2: 1B, 3B, whose
// RoPE scaling factor is 32 rather than 8), and TorchTitan's debugmodel, which keeps Llama 3's
// theta and (default, factor 8) RoPE scaling at a size that trains in seconds.
const std::map<std::string, ModelArgs>& flavors() {
  static const std::map<std::string, ModelArgs> table = [] {
    // Every released size has 8 kv heads and the 128256-token vocabulary.
    auto released = [](int64_t dim, int64_t n_layers, int64_t n_heads, int64_t multiple_of,
                       double ffn_multiplier, double rope_factor) {
      ModelArgs a;
      a.dim = dim;
      a.n_layers = n_layers;
      a.n_heads = n_heads;
      a.n_kv_heads = 8;
      a.vocab_size = 128256;
      a.multiple_of = multiple_of;
      a.ffn_dim_multiplier = ffn_multiplier;
      a.rope_scaling.factor = rope_factor;
      return a;
    };
    ModelArgs debug;
    debug.dim = 256;
    debug.n_layers = 6;
    debug.n_heads = 16;
    debug.n_kv_heads = 16;
    debug.vocab_size = 2048;
    debug.multiple_of = 256;
    std::map<std::string, ModelArgs> t;
    t["debugmodel"] = debug;
    t["1B"] = released(2048, 16, 32, 256, 1.5, 32);
    t["3B"] = released(3072, 28, 24, 256, 1.0, 32);
    t["8B"] = released(4096, 32, 32, 1024, 1.3, 8);
    t["70B"] = released(8192, 80, 64, 4096, 1.3, 8);
    t["405B"] = released(16384, 126, 128, 4096, 1.2, 8);
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> flavor_names() {
  // Smallest first, not the map's alphabetical order.
  return {"debugmodel", "1B", "3B", "8B", "70B", "405B"};
}

ModelArgs flavor(const std::string& name) {
  auto it = flavors().find(name);
  if (it == flavors().end()) {
    std::string known;
    for (const std::string& n : flavor_names()) known += (known.empty() ? "" : ", ") + n;
    TITAN_CHECK(false, "llama3: unknown flavor '", name, "'; choose one of: ", known);
  }
  return it->second;
}

ModelSummary summarize(const ModelArgs& a, int64_t seq_len) {
  a.validate();
  TITAN_CHECK(seq_len > 0, "llama3 summarize: seq_len must be positive, got ", seq_len);
  const int64_t q_dim = a.n_heads * a.head_dim(), kv_dim = a.n_kv_heads * a.head_dim(),
                ffn = a.ffn_hidden_dim();
  const int64_t attention = a.dim * q_dim + 2 * a.dim * kv_dim + q_dim * a.dim;
  const int64_t layer = attention + 3 * a.dim * ffn + 2 * a.dim;
  ModelSummary s;
  s.n_layers = a.n_layers;
  s.n_heads = a.n_heads;
  s.n_kv_heads = a.n_kv_heads;
  s.ffn_hidden_dim = a.ffn_hidden_dim();
  s.vocab_size = a.vocab_size;
  s.num_embedding_params = a.vocab_size * a.dim;
  s.num_params = s.num_embedding_params + a.n_layers * layer + a.dim + a.dim * a.vocab_size;
  s.flops_per_token =
      6.0 * static_cast<double>(s.num_params - s.num_embedding_params) +
      12.0 * static_cast<double>(a.n_layers) * static_cast<double>(q_dim) * static_cast<double>(seq_len);
  s.description = "dim " + std::to_string(a.dim) + ", " + std::to_string(a.n_layers) + " layers, " +
                  std::to_string(a.n_heads) + " heads (" + std::to_string(a.n_kv_heads) + " kv), head_dim " +
                  std::to_string(a.head_dim()) + ", ffn " + std::to_string(ffn) + ", vocab " +
                  std::to_string(a.vocab_size) + "; " + fmt_count(static_cast<double>(s.num_params)) +
                  " parameters";
  return s;
}

}  // namespace titan::models::llama3
