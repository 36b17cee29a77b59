// Context parallelism's load-balanced layout (cp_positions, cp_shard) and the mask rule read
// through positions (Mask::at_positions) that its ring attention builds on.
#include <gtest/gtest.h>

#include <vector>

#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/mask.h"
#include "titan/parallel/context_parallel.h"

namespace titan::parallel {
namespace {

using attention::Mask;
using attention::Visibility;

TEST(ContextParallelLayout, RankHoldsChunkRAndItsMirror) {
  // 16 tokens, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(cp_positions(16, 0, 2), (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(cp_positions(16, 1, 2), (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(cp_positions(8, 0, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Every position once over the ranks.
  std::vector<int> seen(24, 0);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t p : cp_positions(24, r, 3)) ++seen[p];
  EXPECT_EQ(seen, std::vector<int>(24, 1));
}

TEST(ContextParallelLayout, ShardTakesThePositionsAlongAnyDim) {
  const Tensor x = Tensor::arange(2 * 12 * 3).view({2, 12, 3});
  for (int64_t r = 0; r < 3; ++r) {
    const Tensor local = cp_shard(x, 1, r, 3);
    ASSERT_EQ(local.sizes(), (Shape{2, 4, 3}));
    const std::vector<int64_t> pos = cp_positions(12, r, 3), got = local.to_vector<int64_t>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(got[(b * 4 + i) * 3 + j], (b * 12 + pos[i]) * 3 + j);
  }
  const Tensor y = Tensor::arange(8).view({8, 1});
  EXPECT_EQ(cp_shard(y, 0, 1, 2).to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(cp_shard(y.view({1, 8}), -1, 0, 2).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 6, 7}));
}

TEST(ContextParallelLayout, RefusesWhatItCannotCut) {
  const Tensor x = Tensor::zeros({1, 10});
  EXPECT_TITAN_ERROR(cp_shard(x, 1, 0, 2), "multiple of 4", "got 10");
  EXPECT_TITAN_ERROR(cp_shard(x, 1, 2, 2), "0 <= cp_rank < cp_size");
  EXPECT_TITAN_ERROR(cp_shard(x, 2, 0, 1), "dim 2 is out of range");
  EXPECT_TITAN_ERROR(cp_positions(6, 0, 2), "multiple of 4");
}

// The rule at positions against the rule asked pair by pair at those positions, for tiles that
// straddle runs of consecutive positions.
TEST(ContextParallelLayout, MaskAtPositionsIsTheRuleAtThosePositions) {
  const int64_t S = 32, cp = 2;
  std::vector<int64_t> ids(S);
  for (int64_t s = 0; s < S; ++s) ids[s] = s < 5 ? 0 : s < 19 ? 1 : 2;
  const Mask document = Mask::document(Tensor::from_vector(ids, {1, S}));
  for (const Mask& rule : {Mask::causal(), document}) {
    std::vector<uint8_t> global(S * S);
    rule.fill(0, 0, S, 0, S, global.data());
    for (int64_t qr = 0; qr < cp; ++qr)
      for (int64_t kr = 0; kr < cp; ++kr) {
        const std::vector<int64_t> qp = cp_positions(S, qr, cp), kp = cp_positions(S, kr, cp);
        const Mask local = Mask::at_positions(rule, qp, kp);
        const auto L = static_cast<int64_t>(qp.size());
        EXPECT_EQ(local.seq(), L);
        for (int64_t q0 = 0; q0 < L; q0 += 3)
          for (int64_t k0 = 0; k0 < L; k0 += 5) {
            const int64_t q1 = std::min(L, q0 + 6), k1 = std::min(L, k0 + 7);
            std::vector<uint8_t> tile((q1 - q0) * (k1 - k0));
            local.fill(0, q0, q1, k0, k1, tile.data());
            int64_t seen = 0;
            for (int64_t i = q0; i < q1; ++i)
              for (int64_t j = k0; j < k1; ++j) {
                const uint8_t want = global[qp[i] * S + kp[j]];
                EXPECT_EQ(tile[(i - q0) * (k1 - k0) + (j - k0)], want)
                    << rule.describe() << " " << i << "," << j;
                seen += want;
              }
            const Visibility v = local.classify(0, q0, q1, k0, k1);
            if (seen == 0) {
              EXPECT_EQ(v, Visibility::none);
            } else if (seen == (q1 - q0) * (k1 - k0)) {
              EXPECT_EQ(v, Visibility::full);
            } else {
              EXPECT_EQ(v, Visibility::partial);
            }
          }
      }
  }
  EXPECT_TITAN_ERROR(Mask::at_positions(document, {0, 40}, {0, 1}), "position 40 is outside [0, 32)");
  EXPECT_TITAN_ERROR(Mask::at_positions(Mask::causal(), {0}, {0, 1}), "as many of each");
}

}  // namespace
}  // namespace titan::parallel
