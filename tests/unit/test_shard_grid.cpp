// How FSDP splits a parameter over ranks (parallel/shard_grid.h): every rank within a few percent
// of numel / ranks at any rank count, FSDP2's dim-0 split wherever that is already so, and
// boxes that tile the tensor exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "titan/parallel/shard_grid.h"

namespace titan::parallel {
namespace {

double share(const Shape& shape, int64_t ranks) {
  double n = 1;
  for (int64_t s : shape) n *= static_cast<double>(s);
  return n / static_cast<double>(ranks);
}

// Each element of the tensor lies in exactly one rank's box, and each box fits the chunk.
void expect_tiles_once(const Shape& shape, const ShardGrid& g, int64_t ranks) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  std::vector<int> covered(static_cast<size_t>(numel), 0);
  for (int64_t r = 0; r < ranks; ++r) {
    const ShardBox b = grid_box(shape, g, r);
    for (size_t d = 0; d < shape.size(); ++d) ASSERT_LE(b.sizes[d], g.chunk[d]);
    std::vector<int64_t> at(shape.size(), 0);
    bool empty = false;
    for (int64_t s : b.sizes) empty = empty || s == 0;
    if (empty) continue;
    while (true) {
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + b.offsets[d] + at[d];
      ++covered[static_cast<size_t>(flat)];
      size_t d = shape.size();
      while (d-- > 0 && ++at[d] == b.sizes[d]) at[d] = 0;
      if (d == static_cast<size_t>(-1)) break;
    }
  }
  for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(covered[static_cast<size_t>(i)], 1) << "element " << i;
}

TEST(ShardGrid, KeepsDimZeroWhereFsdp2sSplitIsEven) {
  // A matrix of many rows: FSDP2's split, padding included (149 rows a rank, 0.4% over).
  const ShardGrid g = plan_shard_grid({151936, 64}, 1024);
  EXPECT_EQ(g.parts, (Shape{1024, 1}));
  EXPECT_TRUE(g.rows_only());
  EXPECT_EQ(g.chunk, (Shape{149, 64}));
}

TEST(ShardGrid, SplitsExpertsAcrossTheirRowsOnMoreRanksThanExperts) {
  // Qwen 3 235B's experts over 1024 ranks: 8 pieces of each expert, exactly the share.
  const ShardGrid g = plan_shard_grid({128, 1536, 4096}, 1024);
  EXPECT_EQ(g.parts, (Shape{128, 8, 1}));
  EXPECT_FALSE(g.rows_only());
  EXPECT_EQ(g.shard_numel(), 128 * 1536 * 4096 / 1024);
}

TEST(ShardGrid, EveryRankWithinAFewPercentOfItsShare) {
  const std::vector<Shape> shapes = {{128, 1536, 4096}, {128, 4096}, {512, 4096}, {4096}, {8, 64, 32}, {3, 5, 7},
                                     {2, 6},            {7},         {96, 64},    {1, 64}};
  for (const Shape& shape : shapes)
    for (int64_t ranks : {2, 3, 4, 6, 8, 64, 256, 1024}) {
      const ShardGrid g = plan_shard_grid(shape, ranks);
      const double ideal = share(shape, ranks);
      // A rank holds at least one element; a small tensor's share may be less.
      if (ideal >= 64) {
        EXPECT_LE(g.shard_numel(), 1.05 * ideal) << shape_str(shape) << " over " << ranks;
      }
      if (share(shape, 1) <= 1e5) expect_tiles_once(shape, g, ranks);
    }
}

TEST(ShardGrid, ExactGridsDivideTheirDimsAndHonourTheSkippedOnes) {
  // A stack [layers, experts, rows, cols] whose layer dim stays whole, as graph mode splits it.
  const ShardGrid g = plan_shard_grid({4, 8, 64, 32}, 32, {.first_dim = 1, .exact = true});
  EXPECT_EQ(g.parts[0], 1);
  EXPECT_EQ(g.parts[1] * g.parts[2] * g.parts[3], 32);
  for (size_t d = 0; d < 4; ++d) EXPECT_EQ(Shape({4, 8, 64, 32})[d] % g.parts[d], 0);
  // tp's dim stays whole.
  const ShardGrid t = plan_shard_grid({6, 64}, 4, {.skip_dim = 1, .exact = true});
  EXPECT_EQ(t.parts, (Shape{1, 1})) << "no exact grid without dim 1: nothing is split";
  const ShardGrid u = plan_shard_grid({8, 64}, 4, {.skip_dim = 0, .exact = true});
  EXPECT_EQ(u.parts, (Shape{1, 4}));
}

}  // namespace
}  // namespace titan::parallel
