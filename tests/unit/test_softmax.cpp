#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "support/test_util.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/kernels/cpu/streaming_store.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using test::rand_f64;
using SoftmaxFn = Tensor (*)(const Tensor&, int64_t);

constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<std::pair<const char*, SoftmaxFn>> kOps = {{"softmax", ops::softmax},
                                                             {"log_softmax", ops::log_softmax}};

class SoftmaxShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(SoftmaxShapes, GradcheckEveryDim) {
  int64_t n = GetParam();
  // spread wide enough that the rows are far from uniform
  Tensor x = rand_f64({3, n, 2}, 50, true, -4, 4);
  for (const auto& [name, op] : kOps) {
    for (int64_t d : {0, 1, 2, -1, -2}) {
      auto res = autograd::gradcheck([op, d](auto& v) { return std::vector<Tensor>{op(v[0], d)}; }, {x});
      EXPECT_TRUE(res.ok) << name << " dim " << d << ": " << res.message;
    }
    auto res = autograd::gradcheck([op](auto& v) { return std::vector<Tensor>{op(v[0].transpose(0, 1), -1)}; }, {x});
    EXPECT_TRUE(res.ok) << name << " of a transposed view: " << res.message;
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, SoftmaxShapes, ::testing::Values(1, 7, 129));

std::vector<double> run(SoftmaxFn op, const std::vector<double>& row, DType dt) {
  return op(Tensor::from_vector<double>(row, {1, static_cast<int64_t>(row.size())}).to(dt), -1)
      .to_vector<double>();
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
    else EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " [" << i << "]";
  }
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  // softmax is shift-invariant: rows offset by 1e4 (exp overflows far below that) must give the
  // unshifted answer, and rows spanning most of f32's range must stay finite.
  const std::vector<double> base = {0, 1, 2, -3};
  std::vector<double> want_p(4), want_lp(4);
  double lse = std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(-3.0));
  for (size_t i = 0; i < 4; ++i) {
    want_lp[i] = base[i] - lse;
    want_p[i] = std::exp(want_lp[i]);
  }
  for (DType dt : {kF32, kF64}) {
    double tol = dt == kF32 ? 1e-6 : 1e-14;
    std::vector<double> shifted = base;
    for (double& v : shifted) v += 1e4;
    expect_near_all(run(ops::softmax, shifted, dt), want_p, tol, "softmax shifted");
    expect_near_all(run(ops::log_softmax, shifted, dt), want_lp, tol, "log_softmax shifted");
    expect_near_all(run(ops::softmax, {1e38, -1e38, 0}, dt), {1, 0, 0}, tol, "softmax extreme");
    expect_near_all(run(ops::log_softmax, {1e38, -1e38, 0}, dt), {0, -2e38, -1e38}, tol, "log_softmax extreme");
  }
}

TEST(Softmax, NegativeInfinityEntriesAreMaskedOut) {
  // -inf is how attention masks enter: exact zeros in softmax, -inf in log_softmax, and finite
  // gradients everywhere (zero into masked entries for softmax).
  const std::vector<double> row = {0, -kInf, 1, -kInf, 2};
  double lse = std::log(1 + std::exp(1.0) + std::exp(2.0));
  const std::vector<double> want_lp = {-lse, -kInf, 1 - lse, -kInf, 2 - lse};
  std::vector<double> want_p(5);
  for (size_t i = 0; i < 5; ++i) want_p[i] = std::exp(want_lp[i]);
  for (DType dt : {kF32, kF64}) {
    expect_near_all(run(ops::softmax, row, dt), want_p, 1e-6, "softmax");
    expect_near_all(run(ops::log_softmax, row, dt), want_lp, 1e-6, "log_softmax");
    for (const auto& [name, op] : kOps) {
      Tensor x = Tensor::from_vector<double>(row, {5}).to(dt).requires_grad_();
      Tensor cot = Tensor::from_vector<double>({1, 2, 3, 4, 5}, {5}).to(dt);
      Tensor g = autograd::grad({op(x, 0)}, {cot}, {x})[0];
      for (double v : g.to_vector<double>()) EXPECT_TRUE(std::isfinite(v)) << name;
      if (std::string(name) == "softmax") {
        EXPECT_EQ(g.to_vector<double>()[1], 0.0);
        EXPECT_EQ(g.to_vector<double>()[3], 0.0);
      }
    }
  }
}

TEST(Softmax, AllNegativeInfinityRowIsNaNAsInPyTorch) {
  for (const auto& [name, op] : kOps)
    for (double v : run(op, {-kInf, -kInf, -kInf}, kF32)) EXPECT_TRUE(std::isnan(v)) << name;
}

TEST(Softmax, F32RowsAgreeWithF64) {
  // Long rows (several vector widths plus a remainder) and enough of them to split across
  // threads; logits of a realistic spread.
  Tensor x32 = test::rand_f32({67, 1031}, 51, -12, 12);
  Tensor x64 = x32.to(kF64);
  for (const auto& [name, op] : kOps) {
    Tensor y32 = op(x32, -1), y64 = op(x64, -1);
    // A few ulps of f32 (1.2e-7 each) from exp and the row sum; 1.1e-6 was seen with
    // -march=native on an AVX2 AMD EPYC, so 1e-6 was too tight to hold on every machine.
    EXPECT_TRUE(test::tensors_close(y32, y64, 2e-6, name));
  }
  Tensor rowsum = ops::sum(ops::softmax(x32, -1), -1);
  for (double s : rowsum.to_vector<double>()) EXPECT_NEAR(s, 1.0, 1e-5);
  EXPECT_TRUE(test::tensors_close(ops::exp(ops::log_softmax(x32, 0)), ops::softmax(x32, 0), 1e-6,
                                  "exp(log_softmax) vs softmax along dim 0"));
}

TEST(Softmax, StreamedLargeOutputEqualsCachedRowsBitForBit) {
  // Beyond kernels::cpu::kStreamingBytes the kernels write through non-temporal stores; an odd
  // row length starts most rows off a 32-byte boundary. Small slices of the same rows stay below
  // the threshold, so the two paths must agree to the bit.
  using kernels::cpu::SoftmaxKind;
  const int64_t n = 4099, rows = kernels::cpu::kStreamingBytes / (4 * n) + 3;
  ASSERT_TRUE(kernels::cpu::wants_streaming(rows * n, 4));
  Tensor x = test::rand_f32({rows, n}, 52, -12, 12), dy = test::rand_f32({rows, n}, 53, -1, 1);
  const float* xp = x.data<float>();
  const float* gp = dy.data<float>();
  for (SoftmaxKind kind : {SoftmaxKind::softmax, SoftmaxKind::log_softmax}) {
    std::vector<float> y(static_cast<size_t>(rows * n)), y_rows(y.size()), dx(y.size()), dx_rows(y.size());
    kernels::cpu::softmax_fwd(kind, xp, y.data(), rows, n);
    kernels::cpu::softmax_bwd(kind, y.data(), gp, dx.data(), rows, n);
    for (int64_t r = 0; r < rows; r += 7) {
      const int64_t len = std::min<int64_t>(7, rows - r);
      ASSERT_FALSE(kernels::cpu::wants_streaming(len * n, 4));
      kernels::cpu::softmax_fwd(kind, xp + r * n, y_rows.data() + r * n, len, n);
      kernels::cpu::softmax_bwd(kind, y.data() + r * n, gp + r * n, dx_rows.data() + r * n, len, n);
    }
    EXPECT_TRUE(y == y_rows) << (kind == SoftmaxKind::softmax ? "softmax" : "log_softmax") << " forward";
    EXPECT_TRUE(dx == dx_rows) << (kind == SoftmaxKind::softmax ? "softmax" : "log_softmax") << " backward";
  }
}

TEST(Softmax, ScalarAndEmpty) {
  Tensor s = Tensor::scalar<double>(3.5);
  EXPECT_EQ(ops::softmax(s, 0).item(), 1.0);
  EXPECT_EQ(ops::log_softmax(s, -1).item(), 0.0);
  for (const auto& [name, op] : kOps) {
    EXPECT_EQ(op(Tensor::zeros({0, 5}), -1).sizes(), (Shape{0, 5})) << name;
    EXPECT_EQ(op(Tensor::zeros({5, 0}), -1).sizes(), (Shape{5, 0})) << name;
    EXPECT_EQ(op(Tensor::zeros({5, 0, 3}), 0).sizes(), (Shape{5, 0, 3})) << name;
  }
}

TEST(Softmax, BadInputsNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_TITAN_ERROR(ops::softmax(Tensor::zeros({2, 3}, {.dtype = kI64}), -1), "softmax", "i64[2, 3]");
  EXPECT_TITAN_ERROR(ops::log_softmax(Tensor::zeros({4}, {.dtype = kI32}), 0), "log_softmax", "i32[4]");
  EXPECT_TITAN_ERROR(ops::softmax(a, 2), "softmax", "dim 2", "2 dims");
  EXPECT_TITAN_ERROR(ops::log_softmax(a, -3), "log_softmax", "dim -3", "2 dims");
}

}  // namespace
}  // namespace titan
