#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "support/test_util.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/rope.h"

namespace titan {
namespace {

using ops::RopeLayout;
using ops::RopeTable;
using test::rand_f32;
using test::rand_f64;
using test::tensors_close;

constexpr RopeLayout kLayouts[] = {RopeLayout::rotate_half, RopeLayout::interleaved};

class RopeGradcheck : public ::testing::TestWithParam<int64_t> {};

TEST_P(RopeGradcheck, BothLayouts) {
  const int64_t d = GetParam();
  RopeTable table = RopeTable::build(d, 16, 10000.0);
  for (int64_t seq : {1, 7}) {
    for (int64_t start : {0, 9}) {
      Tensor x = rand_f64({2, seq, 3, d}, 40 + static_cast<uint64_t>(seq));
      for (RopeLayout layout : kLayouts) {
        auto res = autograd::gradcheck(
            [&](const std::vector<Tensor>& v) {
              return std::vector<Tensor>{ops::rope(v[0], table, layout, start)};
            },
            {x});
        EXPECT_TRUE(res.ok) << "head_dim " << d << " seq " << seq << " start " << start << ": "
                            << res.message;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EvenSizes, RopeGradcheck, ::testing::Values(2, 8, 130));

// [..., d] with pairs (2i, 2i + 1) -> [..., d] with pairs (i, i + d/2).
Tensor interleaved_to_half(const Tensor& x) {
  const int64_t d = x.size(3);
  return x.view({x.size(0), x.size(1), x.size(2), d / 2, 2}).transpose(3, 4).reshape(x.sizes());
}

TEST(Rope, LayoutsAgreeAfterPermutingDims) {
  RopeTable table = RopeTable::build(130, 32, 10000.0);
  Tensor x = rand_f32({2, 7, 3, 130}, 50);
  Tensor via_interleaved = interleaved_to_half(ops::rope(x, table, RopeLayout::interleaved, 5));
  Tensor via_half = ops::rope(interleaved_to_half(x), table, RopeLayout::rotate_half, 5);
  EXPECT_TRUE(tensors_close(via_half, via_interleaved, 1e-6, "rotate_half vs permuted interleaved"));
}

TEST(Rope, RotatingByPThenMinusPIsIdentity) {
  // The backward is the rotation by minus the angle: pulling y back through it must give x.
  RopeTable table = RopeTable::build(64, 4096, 500000.0);
  for (RopeLayout layout : kLayouts) {
    for (int64_t p : {0, 1, 4000}) {
      Tensor x = rand_f64({2, 7, 3, 64}, 51);
      Tensor y = ops::rope(x, table, layout, p);
      Tensor back = autograd::grad({y}, {y.detach()}, {x})[0];
      EXPECT_TRUE(tensors_close(back, x, 1e-6, "position " + std::to_string(p)));
      if (p == 0) {
        Tensor first = x.narrow(1, 0, 1).detach();
        EXPECT_TRUE(tensors_close(y.narrow(1, 0, 1).detach(), first, 0.0, "position 0 is not rotated"));
      }
    }
  }
}

TEST(Rope, StartPosShiftsPositions) {
  RopeTable table = RopeTable::build(8, 32, 10000.0);
  Tensor x = rand_f32({2, 20, 3, 8}, 52);
  for (RopeLayout layout : kLayouts) {
    Tensor whole = ops::rope(x, table, layout, 0);
    Tensor tail = ops::rope(x.narrow(1, 12, 8).contiguous(), table, layout, 12);
    EXPECT_TRUE(tensors_close(tail, whole.narrow(1, 12, 8), 0.0, "start_pos 12"));
  }
}

// The Llama 3.1 rule (Meta's apply_scaling), written out independently of the library's.
double llama31_inv_freq(int64_t i, int64_t head_dim) {
  const double base = 1.0 / std::pow(500000.0, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  const double scale = 8, low = 1, high = 4, old_context = 8192;
  const double wavelen = 2 * std::numbers::pi / base;
  if (wavelen < old_context / high) return base;
  if (wavelen > old_context / low) return base / scale;
  const double smooth = (old_context / wavelen - low) / (high - low);
  return (1 - smooth) * base / scale + smooth * base;
}

TEST(Rope, Llama31ScaledFrequencies) {
  const int64_t d = 128;
  RopeTable table = RopeTable::build(d, 3, 500000.0, ops::RopeScaling{});
  RopeTable plain = RopeTable::build(d, 3, 500000.0);
  std::vector<float> c = table.cos.to_vector<float>(), s = table.sin.to_vector<float>();
  std::vector<float> pc = plain.cos.to_vector<float>(), ps = plain.sin.to_vector<float>();
  int kept = 0, slowed = 0, blended = 0;
  for (int64_t i = 0; i < d / 2; ++i) {
    // Row 1 holds cos/sin of 1 * inv_freq; every inv_freq is below pi, so atan2 recovers it.
    const size_t k = static_cast<size_t>(d / 2 + i);
    const double got = std::atan2(s[k], c[k]), unscaled = std::atan2(ps[k], pc[k]);
    const double want = llama31_inv_freq(i, d);
    EXPECT_NEAR(got, want, 1e-6 * want) << "frequency " << i;
    const double base = 1.0 / std::pow(500000.0, static_cast<double>(2 * i) / d);
    EXPECT_NEAR(unscaled, base, 1e-6 * base) << "unscaled frequency " << i;
    kept += want == base;
    slowed += want == base / 8;
    blended += want != base && want != base / 8;
  }
  // The dims span all three regimes, so each branch of the rule is exercised.
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
  EXPECT_EQ(table.cos.sizes(), (Shape{3, d / 2}));
  EXPECT_EQ(table.head_dim, d);
}

TEST(Rope, BadInputsNameTheOpAndShapes) {
  RopeTable table = RopeTable::build(8, 4, 10000.0);
  EXPECT_TITAN_ERROR(RopeTable::build(7, 4, 10000.0), "RopeTable::build", "head_dim", "7");
  EXPECT_TITAN_ERROR(RopeTable::build(8, 0, 10000.0), "RopeTable::build", "max_seq", "0");
  EXPECT_TITAN_ERROR(
      RopeTable::build(8, 4, 10000.0, ops::RopeScaling{.low_freq_factor = 4, .high_freq_factor = 1}),
      "RopeTable::build", "low_freq_factor 4", "high_freq_factor 1");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 2, 3, 6}), table, RopeLayout::rotate_half), "rope",
                     "f32[1, 2, 3, 6]", "head_dim 8");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 2, 3, 7}), table, RopeLayout::interleaved), "rope",
                     "f32[1, 2, 3, 7]", "head_dim 8");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({2, 3, 8}), table, RopeLayout::rotate_half), "rope",
                     "f32[2, 3, 8]", "[batch, seq, heads, head_dim]");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 3, 2, 8}), table, RopeLayout::rotate_half, 2), "rope",
                     "f32[1, 3, 2, 8]", "max_seq 4", "positions 2 to 4");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 5, 2, 8}), table, RopeLayout::rotate_half), "rope",
                     "f32[1, 5, 2, 8]", "max_seq 4");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 1, 2, 8}), table, RopeLayout::rotate_half, -1), "rope",
                     "positions -1");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 2, 3, 8}, {.dtype = kI64}), table, RopeLayout::rotate_half),
                     "rope", "i64[1, 2, 3, 8]");
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 2, 3, 8}), RopeTable{}, RopeLayout::rotate_half), "rope",
                     "RopeTable::build");
}

}  // namespace
}  // namespace titan
