#pragma once
// Attention test cases shared by the graph-mode attention tests (the StableHLO lowering and the
// custom calls): shapes, tiles, the mask rule and precision of one case, and packed documents' ids.
#include <cstdint>
#include <string>

#include "titan/core/tensor.h"

namespace titan::test {

enum class AttentionRule { causal, document, window, chunked, window_or_causal };

struct AttentionCase {
  std::string name;
  int64_t B, S, Hq, Hkv, D;
  int64_t block_q, block_kv;
  AttentionRule rule;
  bool bf16;
};

// Packed documents: each of B rows of S tokens cut into runs of random length (1 to S / 3).
Tensor packed_ids(int64_t B, int64_t S, uint64_t seed);

}  // namespace titan::test
