#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "support/test_util.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"

namespace titan {
namespace {

using test::rand_f64;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using Unary = std::function<Tensor(const Tensor&)>;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct PointwiseOp {
  const char* name;
  Unary fn;
  // Elementwise relative bound in the negative tail, where outputs are tiny: e^x there is as
  // accurate as exp_f32, but exp(-x^2/2) (and gelu_tanh's cubic) inherits the rounding of its
  // large f32 argument, about |argument| * 6e-8 relative.
  double tail_lo, tail_rtol;
};

const std::vector<PointwiseOp>& pointwise_ops() {
  static const std::vector<PointwiseOp> ops = {
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, -30, 1e-6},
      {"silu", [](const Tensor& x) { return ops::silu(x); }, -30, 1e-6},
      {"gelu", [](const Tensor& x) { return ops::gelu(x); }, -12, 3e-5},
      {"gelu_tanh", [](const Tensor& x) { return ops::gelu(x, ops::GeluApproximation::tanh); }, -10, 3e-5},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, -30, 1e-6},
      // CLIP's x * sigmoid(1.702 x): e^(1.702 x) in the tail inherits the rounding of the f32
      // product 1.702 x (up to 51 here), as gelu's exp does (measured 2.6e-6 at worst).
      {"quick_gelu", [](const Tensor& x) { return ops::quick_gelu(x); }, -30, 4e-6},
      // Gemma 2's soft-capping of logits: cap * tanh(x / cap).
      {"softcap", [](const Tensor& x) { return ops::softcap(x, 5.0); }, -30, 1e-6},
  };
  return ops;
}

void expect_gradcheck(const std::string& what, const Fn& fn, const std::vector<Tensor>& in) {
  auto res = autograd::gradcheck(fn, in);
  EXPECT_TRUE(res.ok) << what << ": " << res.message;
}

// Worst of |a - ref| / (rtol |ref| + atol) over elements with lo <= x < hi: <= 1 passes.
double worst_mixed_error(const Tensor& x, const Tensor& a, const Tensor& ref, double lo, double hi,
                         double rtol, double atol) {
  std::vector<double> xv = x.to_vector<double>(), av = a.to_vector<double>(), rv = ref.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < xv.size(); ++i)
    if (xv[i] >= lo && xv[i] < hi)
      worst = std::max(worst, std::abs(av[i] - rv[i]) / (rtol * std::abs(rv[i]) + atol));
  return worst;
}

// y = op(x) and dx under a ones cotangent.
std::pair<Tensor, Tensor> value_and_grad(const Unary& op, const Tensor& x) {
  Tensor y = op(x);
  Tensor dx = autograd::grad({y}, {Tensor::ones(y.sizes(), y.options())}, {x})[0];
  return {y, dx};
}

class ActivationShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(ActivationShapes, Gradcheck) {
  int64_t n = GetParam();
  Tensor x = rand_f64({3, n}, 40, true, -4, 4);
  for (const auto& op : pointwise_ops()) {
    Unary f = op.fn;
    expect_gradcheck(op.name, [f](auto& v) { return std::vector<Tensor>{f(v[0])}; }, {x});
    expect_gradcheck(std::string(op.name) + " of a transposed view",
                     [f](auto& v) { return std::vector<Tensor>{f(v[0].transpose(0, 1))}; }, {x});
  }
}

TEST_P(ActivationShapes, SwigluGradcheck) {
  int64_t n = GetParam();
  Tensor gate = rand_f64({n, 3}, 41, true, -4, 4), up = rand_f64({n, 3}, 42, true, -2, 2);
  Tensor up_const = rand_f64({n, 3}, 43, false);
  Fn fn = [](auto& v) { return std::vector<Tensor>{ops::swiglu(v[0], v[1])}; };
  expect_gradcheck("swiglu", fn, {gate, up});
  expect_gradcheck("swiglu, up without grad", fn, {gate, up_const});
  expect_gradcheck("swiglu of transposed views", [](auto& v) {
    return std::vector<Tensor>{ops::swiglu(v[0].transpose(0, 1), v[1].transpose(0, 1))};
  }, {gate, up});
}

INSTANTIATE_TEST_SUITE_P(OddSizes, ActivationShapes, ::testing::Values(1, 7, 129));

// The f32 kernels use vectorised exp and erfc approximations; the f64 ones use libm. Over the
// whole range each element must be within 2e-6 relative or 2e-7 absolute (the absolute part is for
// the zeros of silu' and gelu', where any f32 evaluation cancels), and in the negative tail
// relative error alone is bounded. The range runs past where exp saturates; its size spans
// several parallel chunks.
TEST(Activation, F32MatchesF64AcrossTheRange) {
  Tensor x64 = Tensor::arange(-30.0, 30.0, 0.0007, {.dtype = kF64}).to(kF32).to(kF64);
  Tensor x32 = x64.to(kF32);
  x64.requires_grad_();
  x32.requires_grad_();
  for (const auto& op : pointwise_ops()) {
    auto [y64, g64] = value_and_grad(op.fn, x64);
    auto [y32, g32] = value_and_grad(op.fn, x32);
    EXPECT_LE(worst_mixed_error(x64, y32, y64, -30, 30, 2e-6, 2e-7), 1.0) << op.name << " forward";
    EXPECT_LE(worst_mixed_error(x64, g32, g64, -30, 30, 2e-6, 2e-7), 1.0) << op.name << " gradient";
    EXPECT_LE(worst_mixed_error(x64, y32, y64, op.tail_lo, -3, op.tail_rtol, 0), 1.0) << op.name << " tail";
    EXPECT_LE(worst_mixed_error(x64, g32, g64, op.tail_lo, -3, op.tail_rtol, 0), 1.0) << op.name << " tail'";
  }
}

TEST(Activation, SwigluMatchesItsComposite) {
  Tensor gate = test::rand_f32({37, 1031}, 44, -10, 10), up = test::rand_f32({37, 1031}, 45);
  gate.requires_grad_();
  up.requires_grad_();
  Tensor cot = test::rand_f32({37, 1031}, 46);
  Tensor fused = ops::swiglu(gate, up), ref = ops::silu(gate) * up;
  EXPECT_TRUE(test::tensors_close(fused, ref, 1e-6, "swiglu forward"));
  auto gf = autograd::grad({fused}, {cot}, {gate, up});
  auto gr = autograd::grad({ref}, {cot}, {gate, up});
  EXPECT_TRUE(test::tensors_close(gf[0], gr[0], 1e-6, "swiglu d_gate"));
  EXPECT_TRUE(test::tensors_close(gf[1], gr[1], 1e-6, "swiglu d_up"));
}

// The fused soft-cap against tanh's composite, the math it replaces: Gemma 2's cap of 30 over
// logits far past it (saturated) and near 0, and its gradient against finite differences.
TEST(Activation, SoftcapMatchesItsCompositeAndGradcheck) {
  constexpr double kCap = 30.0;
  Tensor x = test::rand_f32({37, 1031}, 47, -200, 200);
  x.requires_grad_();
  Tensor cot = test::rand_f32({37, 1031}, 48);
  Tensor fused = ops::softcap(x, kCap), ref = ops::tanh(ops::scale(x, 1.0 / kCap)) * kCap;
  EXPECT_TRUE(test::tensors_close(fused, ref, 1e-6, "softcap forward"));
  EXPECT_TRUE(test::tensors_close(autograd::grad({fused}, {cot}, {x})[0],
                                  autograd::grad({ref}, {cot}, {x})[0], 1e-6, "softcap gradient"));
  for (int64_t n : {1, 129}) {
    Tensor x64 = rand_f64({3, n}, 49, true, -90, 90);
    expect_gradcheck("softcap", [](auto& v) { return std::vector<Tensor>{ops::softcap(v[0], kCap)}; }, {x64});
  }
  EXPECT_TITAN_ERROR(ops::softcap(x, 0.0), "softcap", "positive");
  EXPECT_TITAN_ERROR(ops::softcap(Tensor::zeros({2, 3}, {.dtype = kI64}), kCap), "softcap", "i64[2, 3]");
}

TEST(Activation, ExtremeInputsSaturateWithoutNaN) {
  const std::vector<double> xs = {-kInf, -1e30, -1e4, -100, -88.8, -30, 0, 30, 88.8, 100, 1e4, 1e30, kInf};
  for (DType dt : {kF32, kF64}) {
    Tensor x = Tensor::from_vector<double>(xs, {static_cast<int64_t>(xs.size())}).to(dt).requires_grad_();
    auto [y, g] = value_and_grad([](const Tensor& t) { return ops::sigmoid(t); }, x);
    std::vector<double> yv = y.to_vector<double>(), gv = g.to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_TRUE(yv[i] >= 0 && yv[i] <= 1) << "sigmoid(" << xs[i] << ") = " << yv[i];
      EXPECT_TRUE(std::isfinite(gv[i]) && gv[i] >= 0) << "sigmoid'(" << xs[i] << ") = " << gv[i];
    }
    EXPECT_EQ(yv.front(), 0.0);
    EXPECT_EQ(yv.back(), 1.0);
    EXPECT_EQ(yv[6], 0.5);

    // silu and gelu: x for large positive x, 0 for large negative x, unit slope / zero slope.
    Tensor big = Tensor::from_vector<double>({-1e4, -100, 100, 1e4}, {4}).to(dt).requires_grad_();
    for (const auto& op : pointwise_ops()) {
      const std::string name = op.name;
      if (!name.starts_with("silu") && !name.starts_with("gelu") && name != "quick_gelu") continue;
      auto [yb, gb] = value_and_grad(op.fn, big);
      std::vector<double> yv = yb.to_vector<double>(), gv = gb.to_vector<double>();
      const std::vector<double> want_y = {0, 0, 100, 1e4}, want_g = {0, 0, 1, 1};
      for (size_t i = 0; i < want_y.size(); ++i) {
        EXPECT_NEAR(yv[i], want_y[i], 1e-30) << op.name;
        EXPECT_NEAR(gv[i], want_g[i], 1e-30) << op.name << "'";
      }
    }
    // tanh: +-1 with zero slope, at infinities too.
    Tensor ends = Tensor::from_vector<double>({-kInf, -1e4, 1e4, kInf}, {4}).to(dt).requires_grad_();
    auto [yt, gt] = value_and_grad([](const Tensor& t) { return ops::tanh(t); }, ends);
    EXPECT_EQ(yt.to_vector<double>(), (std::vector<double>{-1, -1, 1, 1}));
    EXPECT_EQ(gt.to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
  }
}

TEST(Activation, EmptyTensors) {
  Tensor x = Tensor::zeros({0, 5}).requires_grad_();
  for (const auto& op : pointwise_ops()) EXPECT_EQ(op.fn(x).sizes(), (Shape{0, 5})) << op.name;
  EXPECT_EQ(ops::swiglu(x, x).sizes(), (Shape{0, 5}));
}

TEST(Activation, BadInputsNameTheOpAndShapes) {
  Tensor i64 = Tensor::zeros({2, 3}, {.dtype = kI64}), i32 = Tensor::zeros({4}, {.dtype = kI32});
  EXPECT_TITAN_ERROR(ops::sigmoid(i64), "sigmoid", "i64[2, 3]");
  EXPECT_TITAN_ERROR(ops::silu(i32), "silu", "i32[4]");
  EXPECT_TITAN_ERROR(ops::gelu(i64), "gelu", "i64[2, 3]");
  EXPECT_TITAN_ERROR(ops::gelu(i32, ops::GeluApproximation::tanh), "gelu(tanh)", "i32[4]");
  EXPECT_TITAN_ERROR(ops::quick_gelu(i64), "quick_gelu", "i64[2, 3]");
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), d = Tensor::zeros({2, 3}, {.dtype = kF64});
  EXPECT_TITAN_ERROR(ops::swiglu(a, b), "swiglu", "gate f32[2, 3]", "up f32[3, 2]", "same shape");
  EXPECT_TITAN_ERROR(ops::swiglu(a, d), "swiglu", "f32[2, 3]", "f64[2, 3]", "dtype");
  EXPECT_TITAN_ERROR(ops::swiglu(i64, a), "swiglu", "gate", "i64[2, 3]");
  EXPECT_TITAN_ERROR(ops::swiglu(a, i64), "swiglu", "up", "i64[2, 3]");
}

}  // namespace
}  // namespace titan
