#pragma once
// Upper bounds on a model's sizes, checked by each family's ModelArgs::validate() before any size
// is multiplied by another. They lie far past every released model and keep every count derived
// from them (parameters, FLOPs, buffer sizes) inside int64: with widths up to 2^17, counts up to
// 2^12 and a vocabulary below 2^31, the largest parameter count the formulas can reach is below
// 2^62. A config past them (a typo, a hand-edited config.json) is refused naming its key, instead
// of printing a wrapped-around count or asking for exabytes.
#include <cstdint>
#include <limits>
#include <string>

#include "titan/core/error.h"

namespace titan::models::common {

// dim, ffn_dim, head_dim, an expert's hidden size: 8x Llama 3 405B's dim (16384).
inline constexpr int64_t kMaxWidth = int64_t{1} << 17;
// n_layers, n_heads, n_kv_heads, num_experts: 32x the most any released model has (126 layers).
inline constexpr int64_t kMaxCount = int64_t{1} << 12;
// Token ids are int32.
inline constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max();
// Positions the RoPE table covers: 16x the longest released context (1M).
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

// Throws naming `family` ("llama3 ModelArgs") and `key` when `value` is not in [1, max].
inline void check_size(const std::string& family, const char* key, int64_t value, int64_t max) {
  TITAN_CHECK(value >= 1 && value <= max, family, ": ", key, " must be in [1, ", max, "], got ", value,
              "; larger sizes are past any model titan can hold (and would overflow its parameter count)");
}

}  // namespace titan::models::common
