#include "support/attention_cases.h"

#include <random>
#include <vector>

namespace titan::test {

Tensor packed_ids(int64_t B, int64_t S, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0, doc = 0, left = 0; s < S; ++s, --left) {
      if (left == 0) {
        left = std::uniform_int_distribution<int64_t>(1, S / 3)(rng);
        ++doc;
      }
      ids.push_back(doc);
    }
  return Tensor::from_vector(ids, {B, S});
}

attention::Mask attention_rule(AttentionRule rule, int64_t B, int64_t S, const Tensor& ids) {
  using attention::Mask;
  // Per-row prefixes that end inside different tiles: the first row's a third in, the others further.
  std::vector<int64_t> prefixes;
  for (int64_t b = 0; b < B; ++b) prefixes.push_back(S / 3 + b * S / 5);
  switch (rule) {
    case AttentionRule::causal: return Mask::causal();
    case AttentionRule::document: return Mask::causal() & Mask::document(ids);
    case AttentionRule::window: return Mask::sliding_window(S / 5, 2);
    case AttentionRule::chunked: return Mask::chunked_causal(S / 4);
    case AttentionRule::window_or_causal: return Mask::causal() | Mask::sliding_window(3, 3);
    case AttentionRule::prefix_lm: return Mask::prefix_lm(prefixes);
    case AttentionRule::prefix_or_window: return Mask::prefix_lm({S / 4}) | Mask::sliding_window(S / 6, 3);
    case AttentionRule::chunked_and_window: return Mask::chunked_causal(S / 3) & Mask::sliding_window(S / 7);
  }
  return Mask::causal();
}

}  // namespace titan::test
