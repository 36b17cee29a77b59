#pragma once
// Attention test cases shared by the graph-mode attention tests (the StableHLO lowering and the
// custom calls): shapes, tiles, the mask rule and precision of one case, the rule itself, and packed
// documents' ids.
#include <cstdint>
#include <string>

#include "titan/attention/mask.h"
#include "titan/core/tensor.h"

namespace titan::test {

enum class AttentionRule {
  causal,
  document,          // causal & document ids
  window,            // a sliding window, two keys ahead too
  chunked,           // causal within chunks
  window_or_causal,  // an |
  prefix_lm,         // a bidirectional prefix of its own length per row
  prefix_or_window,  // an | of two rules that are not causal
  chunked_and_window,
};

struct AttentionCase {
  std::string name;
  int64_t B, S, Hq, Hkv, D;
  int64_t block_q, block_kv;
  AttentionRule rule;
  bool bf16;
};

// The rule of a case over B rows of S tokens; `ids` (packed_ids) for AttentionRule::document.
attention::Mask attention_rule(AttentionRule rule, int64_t B, int64_t S, const Tensor& ids);

// Packed documents: each of B rows of S tokens cut into runs of random length (1 to S / 3).
Tensor packed_ids(int64_t B, int64_t S, uint64_t seed);

}  // namespace titan::test
