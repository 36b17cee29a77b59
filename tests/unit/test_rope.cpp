#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "support/test_util.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/rope.h"

namespace titan {
namespace {

using ops::RopeLayout;
using ops::RopeSpec;
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
  EXPECT_TITAN_ERROR(RopeTable::build(7, 4, 10000.0), "RoPE", "head_dim 7", "even");
  EXPECT_TITAN_ERROR(RopeTable::build(8, 0, 10000.0), "RoPE", "max_seq", "0");
  EXPECT_TITAN_ERROR(
      RopeTable::build(8, 4, 10000.0, ops::RopeScaling{.low_freq_factor = 4, .high_freq_factor = 1}),
      "\"llama3\"", "low_freq_factor 4", "high_freq_factor 1");
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

// ---- partial rotary and attention factors -----------------------------------------------------

RopeSpec partial_spec(int64_t head_dim, int64_t rotary_dim, ops::RopeScalingRule scaling) {
  return RopeSpec{
      .head_dim = head_dim, .rotary_dim = rotary_dim, .theta = 10000.0, .scaling = std::move(scaling)};
}

// YaRN scales cos and sin by its attention factor (here 0.1 ln 8 + 1 = 1.21): the map is no rotation.
const ops::RopeScalingRule kYarn = ops::RopeYarn{.factor = 8.0, .original_max_position = 8};

// The forward, or its transpose, of x [b, seq, heads, head_dim] in f64 from the table, written
// per element: pair i of the first rotary_dim dims is (i, i + r/2) or (2i, 2i + 1).
std::vector<double> reference_rope(const Tensor& x, const RopeTable& t, RopeLayout layout, int64_t start,
                                   bool transpose) {
  const std::vector<double> in = x.to_vector<double>();
  const std::vector<float> c = t.cos.to_vector<float>(), s = t.sin.to_vector<float>();
  const int64_t tokens = x.size(0) * x.size(1), heads = x.size(2), d = x.size(3), half = t.rotary_dim / 2;
  std::vector<double> out = in;
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const int64_t pos = start + tok % x.size(1);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (tok * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const size_t k = static_cast<size_t>(pos * half + i);
        const double ci = c[k], si = transpose ? -double(s[k]) : double(s[k]);
        const size_t i0 = static_cast<size_t>(base + (layout == RopeLayout::interleaved ? 2 * i : i));
        const size_t i1 =
            static_cast<size_t>(base + (layout == RopeLayout::interleaved ? 2 * i + 1 : i + half));
        out[i0] = in[i0] * ci - in[i1] * si;
        out[i1] = in[i1] * ci + in[i0] * si;
      }
    }
  }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  EXPECT_LE(err, tol) << what;
}

TEST(Rope, PartialRotaryMatchesAnF64ReferenceForwardAndBackward) {
  for (const auto& [scaling, what] : {std::pair{ops::RopeScalingRule{}, "plain"}, std::pair{kYarn, "yarn"}}) {
    const RopeTable table = RopeTable::build(partial_spec(14, 6, scaling), 32);
    EXPECT_EQ(table.cos.sizes(), (Shape{32, 3}));
    EXPECT_EQ(table.rotary_dim, 6);
    for (RopeLayout layout : kLayouts) {
      for (int64_t start : {0, 21}) {
        const std::string at = std::string(what) +
                               (layout == RopeLayout::interleaved ? " interleaved" : " half") + " from " +
                               std::to_string(start);
        Tensor x = rand_f64({2, 5, 3, 14}, 60);
        Tensor y = ops::rope(x, table, layout, start);
        expect_near(y.to_vector<double>(), reference_rope(x, table, layout, start, false), 1e-14,
                    at + " forward");
        // The passed-through dims are the input's, exactly.
        EXPECT_TRUE(
            tensors_close(y.narrow(3, 6, 8).detach(), x.narrow(3, 6, 8).detach(), 0.0, at + " passed"));
        Tensor w = rand_f64({2, 5, 3, 14}, 61, false);
        Tensor gx = autograd::grad({y}, {w}, {x})[0];
        expect_near(gx.to_vector<double>(), reference_rope(w, table, layout, start, true), 1e-14,
                    at + " backward");
      }
    }
  }
}

TEST(Rope, PartialRotaryGradcheckWithAnAttentionFactor) {
  const RopeTable table = RopeTable::build(partial_spec(10, 4, kYarn), 16);
  for (RopeLayout layout : kLayouts) {
    Tensor x = rand_f64({2, 7, 3, 10}, 62);
    auto res = autograd::gradcheck(
        [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{ops::rope(v[0], table, layout, 9)}; },
        {x});
    EXPECT_TRUE(res.ok) << res.message;
  }
}

TEST(Rope, BackwardIsTheTransposeWhenTheAttentionFactorIsNotOne) {
  // <J x, w> = <x, J^T w>; an inverse rotation would be off by the attention factor squared.
  const RopeTable table = RopeTable::build(partial_spec(8, 8, kYarn), 64);
  const double factor = 0.1 * std::log(8.0) + 1;
  EXPECT_NEAR(std::hypot(table.cos.to_vector<float>()[40], table.sin.to_vector<float>()[40]), factor, 1e-6);
  for (RopeLayout layout : kLayouts) {
    Tensor x = rand_f64({1, 9, 2, 8}, 63);
    Tensor w = rand_f64({1, 9, 2, 8}, 64, false);
    Tensor y = ops::rope(x, table, layout, 50);
    Tensor gx = autograd::grad({y}, {w}, {x})[0];
    double lhs = 0, rhs = 0;
    const std::vector<double> yv = y.to_vector<double>(), wv = w.to_vector<double>(),
                              xv = x.to_vector<double>(), gv = gx.to_vector<double>();
    for (size_t i = 0; i < yv.size(); ++i) {
      lhs += yv[i] * wv[i];
      rhs += xv[i] * gv[i];
    }
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
  }
}

// ---- the frequencies of each scaling rule ------------------------------------------------------

std::vector<double> default_frequencies(double theta, int64_t dim) {
  std::vector<double> f;
  for (int64_t i = 0; i < dim / 2; ++i) f.push_back(std::pow(theta, -2.0 * static_cast<double>(i) / dim));
  return f;
}

TEST(RopeFrequencies, PartialRotaryUsesTheRotatedWidthInTheExponent) {
  const ops::RopeFrequencies f = ops::rope_frequencies(partial_spec(32, 8, {}), 4);
  expect_near(f.inv_freq, default_frequencies(10000.0, 8), 1e-15, "theta^(-2i / 8)");
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeFrequencies, LinearDividesEveryFrequency) {
  const ops::RopeFrequencies f = ops::rope_frequencies(partial_spec(16, 16, ops::RopeLinear{.factor = 4}), 4);
  std::vector<double> want = default_frequencies(10000.0, 16);
  for (double& w : want) w /= 4;
  expect_near(f.inv_freq, want, 1e-15, "linear");
}

TEST(RopeFrequencies, DynamicScalesThetaOnlyPastMaxPositionEmbeddings) {
  const RopeSpec spec = partial_spec(16, 16, ops::RopeDynamic{.factor = 2, .max_position_embeddings = 100});
  for (int64_t max_seq : {1, 50, 100})
    expect_near(ops::rope_frequencies(spec, max_seq).inv_freq, default_frequencies(10000.0, 16), 1e-15,
                "within, " + std::to_string(max_seq));
  // At 300 positions: theta (2 * 300 / 100 - 1)^(16 / 14).
  expect_near(ops::rope_frequencies(spec, 300).inv_freq,
              default_frequencies(10000.0 * std::pow(5.0, 16.0 / 14), 16), 1e-15, "past");
}

TEST(RopeFrequencies, LongropeTakesTheLongFactorsPastTheOriginalLength) {
  const ops::RopeLongrope s{
      .short_factor = {1, 2}, .long_factor = {4, 8}, .original_max_position = 64, .factor = 4};
  const RopeSpec spec = partial_spec(8, 4, s);
  const std::vector<double> base = default_frequencies(10000.0, 4);
  expect_near(ops::rope_frequencies(spec, 64).inv_freq, {base[0] / 1, base[1] / 2}, 1e-15, "short at 64");
  const ops::RopeFrequencies past = ops::rope_frequencies(spec, 65);
  expect_near(past.inv_freq, {base[0] / 4, base[1] / 8}, 1e-15, "long at 65");
  EXPECT_NEAR(past.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(64.0)), 1e-15);
}

TEST(RopeFrequencies, YarnKeepsFastFrequenciesAndInterpolatesSlowOnes) {
  const RopeSpec spec = partial_spec(64, 64, ops::RopeYarn{.factor = 16, .original_max_position = 4096});
  const ops::RopeFrequencies f = ops::rope_frequencies(spec, 8);
  const std::vector<double> base = default_frequencies(10000.0, 64);
  EXPECT_DOUBLE_EQ(f.inv_freq.front(), base.front());
  EXPECT_DOUBLE_EQ(f.inv_freq.back(), base.back() / 16);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(16.0) + 1, 1e-15);
  ops::RopeYarn deepseek{.factor = 40, .original_max_position = 4096, .mscale = 1.0, .mscale_all_dim = 0.5};
  EXPECT_NEAR(ops::rope_frequencies(partial_spec(64, 64, deepseek), 8).attention_factor,
              (0.1 * std::log(40.0) + 1) / (0.05 * std::log(40.0) + 1), 1e-15);
  deepseek.attention_factor = 0.5;
  EXPECT_EQ(ops::rope_frequencies(partial_spec(64, 64, deepseek), 8).attention_factor, 0.5);
}

TEST(RopeFrequencies, NamesAndBadSpecs) {
  EXPECT_EQ(ops::rope_type_name({}), "default");
  EXPECT_EQ(ops::rope_type_name(ops::RopeLongrope{}), "longrope");
  EXPECT_EQ(ops::rope_type_name(ops::RopeScaling{}), "llama3");
  EXPECT_TITAN_ERROR(ops::rope_frequencies(partial_spec(8, 5, {}), 4), "rotary_dim 5", "even");
  EXPECT_TITAN_ERROR(ops::rope_frequencies(partial_spec(8, 10, {}), 4), "rotary_dim 10", "head_dim 8");
  EXPECT_TITAN_ERROR(ops::rope_frequencies(partial_spec(8, 8,
                                                        ops::RopeLongrope{.short_factor = {1, 1},
                                                                          .long_factor = {1, 1},
                                                                          .original_max_position = 4}),
                                           4),
                     "\"longrope\"", "rotated pair (4)", "2 and 2");
  EXPECT_TITAN_ERROR(ops::rope_frequencies(
                         partial_spec(2, 2, ops::RopeDynamic{.factor = 2, .max_position_embeddings = 4}), 4),
                     "\"dynamic\"", "rotated dims 2");
  EXPECT_TITAN_ERROR(
      ops::rope_frequencies(
          partial_spec(8, 8, ops::RopeYarn{.factor = 2, .original_max_position = 4, .attention_factor = -1}),
          4),
      "\"yarn\"", "attention factor", "-1");
  const RopeTable partial = RopeTable::build(partial_spec(8, 4, {}), 4);
  EXPECT_TITAN_ERROR(ops::rope(Tensor::zeros({1, 2, 3, 4}), partial, RopeLayout::rotate_half), "rope",
                     "f32[1, 2, 3, 4]", "head_dim 8");
}

}  // namespace
}  // namespace titan
