#include <gtest/gtest.h>

#include <cmath>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/parallel.h"
#include "titan/ops/norm.h"

namespace titan {
namespace {

using autograd::gradcheck;
using test::rand_f32;
using test::rand_f64;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

void expect_gradcheck(const Fn& fn, const std::vector<Tensor>& in) {
  auto res = gradcheck(fn, in);
  EXPECT_TRUE(res.ok) << res.message;
}

// Row by row in double, straight from the definitions.
std::vector<double> reference_norm(const Tensor& x, const Tensor& w, const Tensor& b, bool centered,
                                   double eps) {
  std::vector<double> xv = x.to_vector<double>(), out(xv.size());
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const size_t d = static_cast<size_t>(x.size(-1));
  for (size_t r = 0; r < xv.size() / d; ++r) {
    const double* row = xv.data() + r * d;
    double mu = 0, var = 0;
    if (centered) {
      for (size_t j = 0; j < d; ++j) mu += row[j];
      mu /= static_cast<double>(d);
    }
    for (size_t j = 0; j < d; ++j) var += (row[j] - mu) * (row[j] - mu);
    const double rs = 1 / std::sqrt(var / static_cast<double>(d) + eps);
    for (size_t j = 0; j < d; ++j)
      out[r * d + j] = (row[j] - mu) * rs * (wv.empty() ? 1 : wv[j]) + (bv.empty() ? 0 : bv[j]);
  }
  return out;
}

void expect_matches(const Tensor& y, const std::vector<double>& ref, double tol) {
  std::vector<double> v = y.to_vector<double>();
  ASSERT_EQ(v.size(), ref.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], ref[i], tol * (1 + std::abs(ref[i]))) << "element " << i;
}

TEST(Norm, ForwardMatchesTheDefinition) {
  for (int64_t d : {1, 7, 129, 4096}) {
    Tensor x = rand_f32({3, 5, d}, 1, -2, 3), w = rand_f32({d}, 2), b = rand_f32({d}, 3);
    expect_matches(ops::rms_norm(x, w, 1e-6), reference_norm(x, w, Tensor(), false, 1e-6), 2e-6);
    expect_matches(ops::rms_norm(x, Tensor(), 1e-6), reference_norm(x, Tensor(), Tensor(), false, 1e-6),
                   2e-6);
    expect_matches(ops::layer_norm(x, w, b, 1e-5), reference_norm(x, w, b, true, 1e-5), 2e-6);
    expect_matches(ops::layer_norm(x, Tensor(), b, 1e-5), reference_norm(x, Tensor(), b, true, 1e-5), 2e-6);
    Tensor x64 = rand_f64({4, d}, 4, false);
    expect_matches(ops::layer_norm(x64, Tensor(), Tensor(), 1e-5),
                   reference_norm(x64, Tensor(), Tensor(), true, 1e-5), 1e-12);
  }
}

TEST(Norm, LayerNormIsStableForALargeMean) {
  // The std is 0.29 and f32's spacing at 1000 is 6e-5, so the f32 mean alone may be off by 1e-4
  // of the std. E[x^2] - mean^2 would lose every digit, and a mean summed in one f32 chain would
  // be off by ~1e-3 of the std.
  Tensor x = rand_f32({4, 1024}, 5, 1000, 1001);
  expect_matches(ops::layer_norm(x, Tensor(), Tensor(), 1e-5),
                 reference_norm(x, Tensor(), Tensor(), true, 1e-5), 2e-4);
}

class NormGradcheck : public ::testing::TestWithParam<int64_t> {};

TEST_P(NormGradcheck, RmsNorm) {
  int64_t n = GetParam();
  Tensor x = rand_f64({2, 3, n}, 10, true, -2, 2), w = rand_f64({n}, 11, true, 0.5, 1.5);
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::rms_norm(v[0], v[1], 1e-5)}; }, {x, w});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::rms_norm(v[0], Tensor(), 1e-5)}; }, {x});
  Tensor frozen = rand_f64({n}, 12, false);
  expect_gradcheck([frozen](auto& v) { return std::vector<Tensor>{ops::rms_norm(v[0], frozen, 1e-5)}; }, {x});
  Tensor x_frozen = rand_f64({2, 3, n}, 13, false);
  expect_gradcheck([x_frozen](auto& v) { return std::vector<Tensor>{ops::rms_norm(x_frozen, v[0], 1e-5)}; },
                   {w});
}

TEST_P(NormGradcheck, LayerNorm) {
  int64_t n = GetParam();
  Tensor x = rand_f64({2, 3, n}, 20, true, -2, 2), w = rand_f64({n}, 21, true, 0.5, 1.5),
         b = rand_f64({n}, 22);
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], v[1], v[2], 1e-5)}; },
                   {x, w, b});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], v[1], Tensor(), 1e-5)}; },
                   {x, w});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], Tensor(), v[1], 1e-5)}; },
                   {x, b});
  expect_gradcheck(
      [](auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], Tensor(), Tensor(), 1e-5)}; }, {x});
  Tensor x_frozen = rand_f64({2, 3, n}, 23, false);
  expect_gradcheck(
      [x_frozen](auto& v) { return std::vector<Tensor>{ops::layer_norm(x_frozen, v[0], v[1], 1e-5)}; },
      {w, b});
}

INSTANTIATE_TEST_SUITE_P(OddSizes, NormGradcheck, ::testing::Values(1, 7, 129));

TEST(Norm, ParameterGradientsDoNotDependOnTheThreadCount) {
  // Enough rows for many reduction blocks, and a row count that divides evenly by none of them.
  const int64_t rows = 3001, d = 96;
  Tensor x = rand_f32({rows, d}, 30), cot = rand_f32({rows, d}, 31);
  auto grads = [&](int threads) {
    const int saved = num_threads();
    set_num_threads(threads);
    Tensor xr = x.clone().requires_grad_(), w = rand_f32({d}, 32).requires_grad_(),
           b = rand_f32({d}, 33).requires_grad_();
    ops::layer_norm(xr, w, b, 1e-5).backward(cot);
    Tensor wr = rand_f32({d}, 34).requires_grad_();
    ops::rms_norm(x, wr, 1e-6).backward(cot);
    set_num_threads(saved);
    return std::vector<std::vector<float>>{xr.grad().to_vector<float>(), w.grad().to_vector<float>(),
                                           b.grad().to_vector<float>(), wr.grad().to_vector<float>()};
  };
  auto one = grads(1);
  for (int threads : {2, 3, 8}) EXPECT_EQ(grads(threads), one) << threads << " threads";
}

TEST(Norm, NoRowsGiveZeroParameterGradients) {
  Tensor x = Tensor::zeros({0, 4}).requires_grad_();
  Tensor w = Tensor::ones({4}).requires_grad_(), b = Tensor::ones({4}).requires_grad_();
  ops::layer_norm(x, w, b, 1e-5).backward(Tensor::zeros({0, 4}));
  ops::rms_norm(x, w, 1e-5).backward(Tensor::zeros({0, 4}));
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(4, 0.f));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, 0.f));
  EXPECT_EQ(x.grad().sizes(), (Shape{0, 4}));
}

TEST(Norm, BadInputsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 4}), w5 = Tensor::zeros({5}), w4 = Tensor::zeros({4});
  EXPECT_TITAN_ERROR(ops::rms_norm(x, w5, 1e-6), "rms_norm", "weight", "f32[5]", "f32[2, 4]", "[4]");
  EXPECT_TITAN_ERROR(ops::rms_norm(x, Tensor::zeros({2, 4}), 1e-6), "rms_norm", "weight", "f32[2, 4]");
  EXPECT_TITAN_ERROR(ops::layer_norm(x, w4, w5, 1e-5), "layer_norm", "bias", "f32[5]", "f32[2, 4]");
  EXPECT_TITAN_ERROR(ops::layer_norm(x, w5, Tensor(), 1e-5), "layer_norm", "weight", "f32[5]");
  EXPECT_TITAN_ERROR(ops::rms_norm(Tensor::zeros({2, 4}, {.dtype = kI64}), Tensor(), 1e-6), "rms_norm",
                     "i64[2, 4]");
  EXPECT_TITAN_ERROR(ops::layer_norm(Tensor::zeros({3}, {.dtype = kI32}), Tensor(), Tensor(), 1e-5),
                     "layer_norm", "i32[3]");
  EXPECT_TITAN_ERROR(ops::rms_norm(x, Tensor::zeros({4}, {.dtype = kF64}), 1e-6), "rms_norm", "f64[4]",
                     "f32[2, 4]");
  EXPECT_TITAN_ERROR(ops::layer_norm(Tensor::zeros({}), Tensor(), Tensor(), 1e-5), "layer_norm", "f32[]");
  EXPECT_TITAN_ERROR(ops::rms_norm(Tensor::zeros({3, 0}), Tensor(), 1e-6), "rms_norm", "f32[3, 0]");
  EXPECT_TITAN_ERROR(ops::rms_norm(x, w4, -1.0), "rms_norm", "eps");
}

}  // namespace
}  // namespace titan
