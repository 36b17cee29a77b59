// Sharded initialisation (nn/sharded_init.h): a rank's box of a tensor, filled into a shard of
// its own, holds exactly the values a one-rank fill of the whole tensor puts there, and the
// generator ends where the one-rank fill leaves it.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "titan/core/meta.h"
#include "titan/nn/init.h"
#include "titan/nn/sharded_init.h"

namespace titan {
namespace {

using nn::init::ShardedInitScope;
using nn::init::ShardTarget;
using nn::init::ShardTargets;
using InitFn = std::function<void(const Tensor&, Generator&)>;

struct Box {
  const char* what;
  Shape offsets;
  Shape sizes;
  Shape dest;  // >= sizes: the rest is padding
};

struct Fill {
  const char* what;
  bool draws;  // takes indices of the stream
  InitFn init;
};

std::vector<Fill> fills() {
  return {
      {"normal_", true, [](const Tensor& t, Generator& g) { nn::init::normal_(t, 0.5, 2.0, g); }},
      {"trunc_normal_", true,
       [](const Tensor& t, Generator& g) { nn::init::trunc_normal_(t, 0.0, 1.0, -1.5, 1.0, g); }},
      {"uniform_", true, [](const Tensor& t, Generator& g) { nn::init::uniform_(t, -0.3, 0.7, g); }},
      {"constant_", false, [](const Tensor& t, Generator&) { nn::init::constant_(t, 3.25); }},
      {"ones_", false, [](const Tensor& t, Generator&) { nn::init::ones_(t); }},
  };
}

// The box of `t`: rows and columns (and whatever else) [offsets, offsets + sizes).
Tensor slice(Tensor t, const Shape& offsets, const Shape& sizes) {
  for (size_t d = 0; d < offsets.size(); ++d) t = t.narrow(static_cast<int64_t>(d), offsets[d], sizes[d]);
  return t.contiguous();
}

// Fills `global` whole on one rank and as each box on a rank of its own, from generators that
// start part-way along the stream (as a parameter after others does); then a second tensor drawn
// after it must agree too, as later parameters' must.
void expect_boxes_match_whole(const Shape& global, const std::vector<Box>& boxes, DType dtype) {
  const uint64_t seed = 42, start = 1234;
  for (const Fill& fill : fills()) {
    Generator whole_gen(seed);
    whole_gen.set_offset(start);
    const Tensor whole = Tensor::zeros(global, {.dtype = dtype});
    fill.init(whole, whole_gen);
    const Tensor after_whole = Tensor::zeros({7}, {.dtype = dtype});
    nn::init::normal_(after_whole, 0, 1, whole_gen);

    for (const Box& box : boxes) {
      const std::string what =
          std::string(fill.what) + " " + std::string(dtype_name(dtype)) + " box " + box.what;
      Tensor handle;
      {
        const MetaScope meta;
        handle = Tensor::zeros(global, {.dtype = dtype});
      }
      const Tensor dest = Tensor::zeros(box.dest, {.dtype = dtype});
      ShardTargets targets;
      targets.add(handle, {.dest = dest, .global_shape = global, .offsets = box.offsets, .sizes = box.sizes});
      Generator gen(seed);
      gen.set_offset(start);
      {
        const ShardedInitScope scope(targets);
        fill.init(handle, gen);
      }
      EXPECT_TRUE(handle.is_meta()) << what << ": the handle itself stays without memory";
      EXPECT_EQ(gen.offset(), start + (fill.draws ? numel_of(global) : 0))
          << what << ": the generator moves past the whole tensor, as on one rank";
      const Shape zero(global.size(), 0);
      EXPECT_TRUE(test::same_bits(slice(dest, zero, box.sizes), slice(whole, box.offsets, box.sizes)))
          << what << ": the box differs from the one-rank fill's";
      // Everything of dest outside its leading box is padding and stays zero.
      Tensor marked = dest.clone();
      Tensor corner = marked;
      for (size_t d = 0; d < box.sizes.size(); ++d)
        corner = corner.narrow(static_cast<int64_t>(d), 0, box.sizes[d]);
      corner.zero_();
      EXPECT_TRUE(test::same_bits(marked, Tensor::zeros(box.dest, {.dtype = dtype})))
          << what << ": padding written";

      const Tensor after = Tensor::zeros({7}, {.dtype = dtype});
      nn::init::normal_(after, 0, 1, gen);
      EXPECT_TRUE(test::same_bits(after, after_whole)) << what << ": the next tensor draws other indices";
    }
  }
}

TEST(ShardedInit, BoxesOfAMatrixMatchTheOneRankFillBitForBit) {
  const Shape global = {10, 12};
  const std::vector<Box> boxes = {
      {"rows 3..7 (FSDP), one padding row", {3, 0}, {4, 12}, {5, 12}},
      {"the last rows, two padding rows", {8, 0}, {2, 12}, {4, 12}},
      {"no rows (more ranks than rows)", {10, 0}, {0, 12}, {1, 12}},
      {"columns 4..9 (rowwise TP)", {0, 4}, {10, 5}, {10, 5}},
      {"columns 6..12, a padding column", {0, 6}, {10, 6}, {10, 7}},
      {"rows 2..9 of columns 5..12, padded on both", {2, 5}, {7, 7}, {8, 8}},
      {"the whole tensor", {0, 0}, {10, 12}, {10, 12}},
  };
  for (DType dtype : {kF32, kF64, kBF16}) expect_boxes_match_whole(global, boxes, dtype);
}

TEST(ShardedInit, BoxesOfExpertsAndVectorsMatchTheOneRankFill) {
  // Grouped experts [experts, hidden, dim]: cut by expert, by hidden row within every expert, by
  // both, and a vector (a norm's weight, a bias) cut in two.
  expect_boxes_match_whole({3, 5, 4},
                           {{"experts 1..3", {1, 0, 0}, {2, 5, 4}, {2, 5, 4}},
                            {"hidden rows 1..4 of every expert", {0, 1, 0}, {3, 3, 4}, {3, 4, 4}},
                            {"expert 2, hidden 3..5, columns 1..3", {2, 3, 1}, {1, 2, 2}, {2, 2, 3}}},
                           kF32);
  expect_boxes_match_whole({9}, {{"5..9 of a vector", {5}, {4}, {5}}}, kF32);
}

TEST(ShardedInit, LongRowsSpreadOverThreadsMatchToo) {
  // Short runs by the thousand (a column box) and one long run (a row box), past every grain.
  expect_boxes_match_whole({3000, 40},
                           {{"columns 8..24", {0, 8}, {3000, 16}, {3000, 16}},
                            {"rows 1000..2000", {1000, 0}, {1000, 40}, {1001, 40}}},
                           kF32);
}

TEST(ShardedInit, TargetsAreCheckedWhenRegistered) {
  Tensor handle;
  {
    const MetaScope meta;
    handle = Tensor::zeros({4, 6});
  }
  ShardTargets targets;
  const Tensor dest = Tensor::zeros({2, 6});
  EXPECT_TITAN_ERROR(
      targets.add(handle, {.dest = dest, .global_shape = {4, 6}, .offsets = {3, 0}, .sizes = {2, 6}}),
      "box must lie inside the global shape", "dim 0");
  EXPECT_TITAN_ERROR(
      targets.add(handle, {.dest = dest, .global_shape = {4, 6}, .offsets = {0, 0}, .sizes = {3, 6}}),
      "fit in dest");
  EXPECT_TITAN_ERROR(targets.add(handle, {.dest = Tensor::zeros({2, 6}, {.dtype = kF64}),
                                          .global_shape = {4, 6},
                                          .offsets = {0, 0},
                                          .sizes = {2, 6}}),
                     "dtype");
  EXPECT_TITAN_ERROR(
      targets.add(handle, {.dest = dest, .global_shape = {4, 6}, .offsets = {0}, .sizes = {2, 6}}),
      "same number of dims");
  EXPECT_TITAN_ERROR(
      targets.add(handle, {.dest = handle, .global_shape = {4, 6}, .offsets = {0, 0}, .sizes = {2, 6}}),
      "meta");
  targets.add(handle, {.dest = dest, .global_shape = {4, 6}, .offsets = {2, 0}, .sizes = {2, 6}});
  EXPECT_TITAN_ERROR(
      targets.add(handle, {.dest = dest, .global_shape = {4, 6}, .offsets = {0, 0}, .sizes = {2, 6}}),
      "already has a target");
  Generator gen(0);
  {
    const ShardedInitScope scope(targets);
    nn::init::normal_(handle, 0, 1, gen);
    EXPECT_NE(dest.to_vector<float>(), std::vector<float>(12, 0.0f));
  }
  // Out of the scope the target is gone.
  EXPECT_TITAN_ERROR(nn::init::normal_(handle, 0, 1, gen), "meta", "no shard target");
}

}  // namespace
}  // namespace titan
