// bf16 matrix products (kernels/cpu/onednn_matmul.h) and the mixed precision of the ops that run
// them (core/autocast.h). Each product is checked against float32 on the same bf16-rounded
// operands, where the products are exact and only the order of the float32 sums differs, so the
// bound is float32's (1e-5 of the sum of |terms|) and catches a wrong layout, transpose, scale or
// cast; and against float32 on the unrounded operands with bf16's own bound (8 bits of mantissa:
// 2^-9 relative per rounding, so 2^-8 for a product of two rounded operands and 2^-7 for three).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/test_util.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/kernels/cpu/bf16_convert.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/moe.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16(v[i]);
  return out;
}

Tensor rounded(const Tensor& t) {
  return t.detach().to(kBF16).to(kF32);
}

Tensor abs_of(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  for (float& e : v) e = std::abs(e);
  return Tensor::from_vector(v, t.sizes());
}

// |a - b| <= tol * bound + 1e-6 elementwise, reporting the worst element.
::testing::AssertionResult within(const Tensor& a, const Tensor& b, const Tensor& bound, double tol) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>(),
                            z = bound.to_vector<double>();
  if (x.size() != y.size() || x.size() != z.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= tol * z[i] + 1e-6))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << x[i] << " vs " << y[i] << ", allowed " << tol * z[i] + 1e-6;
  return ::testing::AssertionSuccess();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

class Bf16GemmTranspose : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// Padded leading dimensions, alpha 0.5, beta 2 and beta 0 over NaN (overwritten, not scaled), odd k,
// and a single row or column.
TEST_P(Bf16GemmTranspose, MatchesFloat32OnRoundedOperands) {
  TITAN_SKIP_WITHOUT_BF16();
  auto [ta, tb] = GetParam();
  const int64_t k = 129;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{37, 19}, {1, 19}, {37, 1}, {64, 96}}) {
    for (float beta : {2.0f, 0.0f}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << ", n " << n << ", beta " << beta);
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      const std::vector<bf16> a = to_bf16(test::rand_f32({(ta ? k : m) * lda}, 1).to_vector<float>());
      const std::vector<bf16> b = to_bf16(test::rand_f32({(tb ? n : k) * ldb}, 2).to_vector<float>());
      std::vector<float> c = test::rand_f32({m * ldc}, 3).to_vector<float>();
      std::vector<float> c0 = beta == 0 ? std::vector<float>(c.size(), 0.0f) : c;
      if (beta == 0) std::fill(c.begin(), c.end(), std::nanf(""));
      kernels::cpu::gemm<bf16>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0, size = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double term =
                static_cast<double>(static_cast<float>(ta ? a[p * lda + i] : a[i * lda + p])) *
                static_cast<float>(tb ? b[j * ldb + p] : b[p * ldb + j]);
            acc += term;
            size += std::abs(term);
          }
          const double want = 0.5 * acc + beta * c0[i * ldc + j];
          ASSERT_NEAR(c[i * ldc + j], want, 1e-5 * (size + std::abs(want)) + 1e-6) << i << "," << j;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Bf16GemmTranspose, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// One primitive serves every row (or summed) count of the expert groups: each count must still
// give its own product, the empty one included.
TEST(Bf16Gemm, VaryingCountsShareAPrimitiveAndStayExact) {
  TITAN_SKIP_WITHOUT_BF16();
  const int64_t n = 24, k = 40;
  for (auto varying : {kernels::cpu::Varying::m, kernels::cpu::Varying::k}) {
    for (int64_t count : {5, 0, 17, 1, 64}) {
      const int64_t m = varying == kernels::cpu::Varying::m ? count : 12;
      const int64_t kk = varying == kernels::cpu::Varying::k ? count : k;
      const std::vector<bf16> a = to_bf16(test::rand_f32({m * kk + 1}, 7).to_vector<float>());
      const std::vector<bf16> b = to_bf16(test::rand_f32({kk * n + 1}, 8).to_vector<float>());
      std::vector<float> c(static_cast<size_t>(m * n), 1.0f);
      kernels::cpu::gemm<bf16>(false, false, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.0f, c.data(), n,
                               varying);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < kk; ++p)
            acc += static_cast<double>(static_cast<float>(a[i * kk + p])) * static_cast<float>(b[p * n + j]);
          ASSERT_NEAR(c[i * n + j], acc, 1e-4) << "count " << count << " at " << i << "," << j;
        }
    }
  }
}

TEST(Bf16Convert, VectorRoundingMatchesScalarIncludingTiesNanAndDenormals) {
  std::vector<float> v = test::rand_f32({1000}, 11, -1e3, 1e3).to_vector<float>();
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 256,
                            1.0f + 3.0f / 256,  // ties to even, down and up
                            std::numeric_limits<float>::denorm_min(),
                            -1e-39f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::nanf(""),
                            -std::nanf("")};
  for (size_t i = 0; i < std::size(specials); ++i) v[3 * i + 1] = specials[i];
  std::vector<bf16> got(v.size());
  kernels::cpu::floats_to_bf16(v.data(), got.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(got[i].bits, bf16(v[i]).bits) << "element " << i << " = " << v[i];
}

struct LinearRun {
  Tensor y, dx, dw;
};

LinearRun linear_run(const Tensor& x, const Tensor& w, const Tensor& gy) {
  Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_();
  Tensor y = ops::linear(xl, wl);
  ops::sum(ops::mul(y, gy)).backward();
  return {y.detach(), xl.grad(), wl.grad()};
}

TEST(Autocast, LinearMultipliesBf16OperandsIntoFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
  const Tensor x = test::rand_f32({3, 33, 64}, 21), w = test::rand_f32({48, 64}, 22),
               gy = test::rand_f32({3, 33, 48}, 23);
  LinearRun mixed;
  {
    const AutocastGuard bf16(kBF16);
    mixed = linear_run(x, w, gy);
  }
  EXPECT_EQ(mixed.y.dtype(), kF32);
  EXPECT_EQ(mixed.dx.dtype(), kF32);
  EXPECT_EQ(mixed.dw.dtype(), kF32);
  // The same products in float32 on the rounded operands (gy rounded too: backward multiplies bf16).
  const LinearRun on_rounded = linear_run(rounded(x), rounded(w), rounded(gy));
  EXPECT_TRUE(test::tensors_close(mixed.y, on_rounded.y, 1e-5, "y"));
  EXPECT_TRUE(test::tensors_close(mixed.dx, on_rounded.dx, 1e-5, "dx"));
  EXPECT_TRUE(test::tensors_close(mixed.dw, on_rounded.dw, 1e-5, "dw"));
  // And float32 on the operands as they are, within bf16's bound.
  const LinearRun f32 = linear_run(x, w, gy);
  const Tensor ax = abs_of(x), aw = abs_of(w), ag = abs_of(gy);
  EXPECT_TRUE(within(mixed.y, f32.y, ops::matmul(ax, aw.transpose(0, 1)), std::ldexp(1.0, -8)));
  EXPECT_TRUE(within(mixed.dx, f32.dx, ops::matmul(ag, aw), std::ldexp(1.0, -7)));
  EXPECT_TRUE(within(mixed.dw, f32.dw,
                     ops::matmul(ag.reshape({-1, 48}).transpose(0, 1), ax.reshape({-1, 64})),
                     std::ldexp(1.0, -7)));
  EXPECT_GT(max_abs_diff(mixed.y, f32.y), 1e-5) << "no bf16 rounding happened";
}

// Inside an AutocastCastCache a parameter is converted once and its copy reused; an activation
// (no leaf that requires grad) is converted each time; the products are bit for bit those without.
TEST(Autocast, CastCacheConvertsEachParameterOnce) {
  TITAN_SKIP_WITHOUT_BF16();
  const autograd::NoGradGuard inference;
  const Tensor w = test::rand_f32({48, 64}, 22).requires_grad_(), x = test::rand_f32({5, 64}, 21);
  const AutocastGuard bf16(kBF16);
  const Tensor plain = ops::linear(x, w), plain_twice = ops::linear(ops::scale(x, 2.0), w);
  {
    const AutocastCastCache cache;
    const Tensor first = ops::linear(x, w), second = ops::linear(ops::scale(x, 2.0), w);
    EXPECT_EQ(cache.size(), 1u) << "only the weight is cached";
    EXPECT_TRUE(test::same_bits(first, plain));
    EXPECT_TRUE(test::same_bits(second, plain_twice)) << "the cached copy serves a second product";
    EXPECT_TRUE(test::same_bits(autocast_cast(w, kBF16), autocast_cast(w, kBF16)));
    EXPECT_EQ(autocast_cast(w, kBF16).data_ptr(), autocast_cast(w, kBF16).data_ptr()) << "one copy, reused";
  }
  EXPECT_NE(autocast_cast(w, kBF16).data_ptr(), autocast_cast(w, kBF16).data_ptr())
      << "without a cache every cast is a new copy";
}

// AutocastCasts kept by the caller serve every scope that opens them (a frozen encoder's calls),
// and only those: a scope of its own, or none, converts again.
TEST(Autocast, KeptCastsServeLaterScopes) {
  TITAN_SKIP_WITHOUT_BF16();
  const autograd::NoGradGuard inference;
  const Tensor w = test::rand_f32({48, 64}, 22).requires_grad_(), x = test::rand_f32({5, 64}, 21);
  const AutocastGuard bf16(kBF16);
  AutocastCasts kept;
  const void* first_copy;
  Tensor first;
  {
    const AutocastCastCache cache(kept);
    first = ops::linear(x, w);
    first_copy = autocast_cast(w, kBF16).data_ptr();
  }
  ASSERT_EQ(kept.size(), 1u);
  {
    const AutocastCastCache cache(kept);
    EXPECT_EQ(autocast_cast(w, kBF16).data_ptr(), first_copy) << "a later scope reuses the kept copy";
    EXPECT_TRUE(test::same_bits(ops::linear(x, w), first));
  }
  {
    const AutocastCastCache own;
    EXPECT_NE(autocast_cast(w, kBF16).data_ptr(), first_copy) << "a scope of its own makes its own";
  }
  kept.clear();
  EXPECT_EQ(kept.size(), 0u);
  const AutocastCastCache cache(kept);
  EXPECT_TRUE(test::same_bits(ops::linear(x, w), first));
  EXPECT_EQ(kept.size(), 1u) << "cleared casts convert again";
}

// Backward multiplies in the precision forward did, whatever autocast says when it runs.
TEST(Autocast, BackwardFollowsTheForwardsPrecision) {
  TITAN_SKIP_WITHOUT_BF16();
  const Tensor x = test::rand_f32({16, 32}, 31), w = test::rand_f32({8, 32}, 32),
               gy = test::rand_f32({16, 8}, 33);
  const LinearRun inside = [&] {
    const AutocastGuard bf16(kBF16);
    return linear_run(x, w, gy);
  }();
  Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(), y;
  {
    const AutocastGuard bf16(kBF16);
    y = ops::linear(xl, wl);
  }
  ops::sum(ops::mul(y, gy)).backward();
  EXPECT_TRUE(test::same_bits(xl.grad(), inside.dx));
  EXPECT_TRUE(test::same_bits(wl.grad(), inside.dw));
  // And an f32 forward stays f32 in a bf16 backward.
  Tensor xf = x.detach().requires_grad_();
  Tensor yf = ops::linear(xf, w);
  {
    const AutocastGuard bf16(kBF16);
    ops::sum(ops::mul(yf, gy)).backward();
  }
  EXPECT_TRUE(test::same_bits(xf.grad(), linear_run(x, w, gy).dx));
}

TEST(Autocast, MatmulAndDoublesAndOffState) {
  TITAN_SKIP_WITHOUT_BF16();
  const Tensor a = test::rand_f32({2, 9, 20}, 41), b = test::rand_f32({20, 7}, 42);
  Tensor mixed;
  {
    const AutocastGuard bf16(kBF16);
    mixed = ops::matmul(a, b);
    // float64 operands are never narrowed.
    const Tensor a64 = a.to(kF64), b64 = b.to(kF64);
    EXPECT_TRUE(test::same_bits(ops::matmul(a64, b64), [&] {
      const AutocastGuard off(kF32);
      return ops::matmul(a64, b64);
    }()));
  }
  EXPECT_EQ(mixed.dtype(), kF32);
  EXPECT_TRUE(test::tensors_close(mixed, ops::matmul(rounded(a), rounded(b)), 1e-5, "matmul"));
  EXPECT_EQ(autocast_dtype(), kF32);
  EXPECT_THROW(AutocastGuard{kF64}, Error);
}

TEST(Autocast, GroupedExpertProductsMultiplyBf16) {
  TITAN_SKIP_WITHOUT_BF16();
  const std::vector<int64_t> groups{5, 0, 11, 4};
  const Tensor x = test::rand_f32({20, 24}, 51), w = test::rand_f32({4, 16, 24}, 52),
               w3 = test::rand_f32({4, 16, 24}, 53), gy = test::rand_f32({20, 16}, 54);
  auto run = [&](const Tensor& xi, const Tensor& wi, const Tensor& w3i, const Tensor& g, bool swiglu) {
    Tensor xl = xi.detach().requires_grad_(), wl = wi.detach().requires_grad_(),
           w3l = w3i.detach().requires_grad_();
    Tensor y = swiglu ? ops::grouped_swiglu(xl, wl, w3l, groups) : ops::grouped_linear(xl, wl, groups);
    ops::sum(ops::mul(y, g)).backward();
    return std::vector<Tensor>{y.detach(), xl.grad(), wl.grad()};
  };
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "grouped_swiglu" : "grouped_linear");
    std::vector<Tensor> mixed;
    {
      const AutocastGuard bf16(kBF16);
      mixed = run(x, w, w3, gy, swiglu);
    }
    // grouped_linear's backward rounds gy; grouped_swiglu's rounds the gradients of gate and up,
    // which only the f32 run on rounded operands can't reproduce: compare its forward exactly and
    // its gradients within bf16's bound.
    const std::vector<Tensor> on_rounded = run(rounded(x), rounded(w), rounded(w3), rounded(gy), swiglu);
    const std::vector<Tensor> f32 = run(x, w, w3, gy, swiglu);
    EXPECT_TRUE(test::tensors_close(mixed[0], on_rounded[0], 1e-5, "y"));
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(mixed[i].dtype(), kF32);
      if (!swiglu) {
        EXPECT_TRUE(test::tensors_close(mixed[i], on_rounded[i], 1e-5, "on rounded operands"));
      }
      EXPECT_TRUE(test::tensors_close(mixed[i], f32[i], 3e-2, "against float32")) << i;
    }
    EXPECT_GT(max_abs_diff(mixed[0], f32[0]), 1e-5) << "no bf16 rounding happened";
  }
}

// Activation checkpointing re-runs the forward in backward: in the forward's precision, so that the
// rebuilt graph is the one forward would have made.
TEST(Autocast, CheckpointRecomputesInTheForwardsPrecision) {
  TITAN_SKIP_WITHOUT_BF16();
  const Tensor x = test::rand_f32({12, 32}, 61), w = test::rand_f32({32, 32}, 62);
  auto body = [&](const Tensor& in) { return ops::linear(ops::linear(in, w), w); };
  auto grad_of = [&](bool checkpointed) {
    Tensor xl = x.detach().requires_grad_(), y;
    {
      const AutocastGuard bf16(kBF16);
      y = checkpointed ? autograd::checkpoint(body, xl) : body(xl);
    }
    ops::sum(y).backward();
    return xl.grad();
  };
  EXPECT_TRUE(test::same_bits(grad_of(true), grad_of(false)));
}

}  // namespace
}  // namespace titan
