#include <gtest/gtest.h>

#include <cmath>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/group_norm.h"

namespace titan {
namespace {

using autograd::gradcheck;
using test::rand_f32;
using test::rand_f64;

// Group by group in double, straight from the definition.
std::vector<double> reference_group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b,
                                         double eps) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), len = x.numel() / (n * c), d = c / groups * len;
  std::vector<double> y(xv.size());
  for (int64_t r = 0; r < n * groups; ++r) {
    const double* p = xv.data() + r * d;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mu += p[i];
    mu /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) var += (p[i] - mu) * (p[i] - mu);
    const double rs = 1 / std::sqrt(var / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      const auto ch = static_cast<size_t>(r % groups * (c / groups) + i / len);
      y[static_cast<size_t>(r * d + i)] =
          (p[i] - mu) * rs * (wv.empty() ? 1 : wv[ch]) + (bv.empty() ? 0 : bv[ch]);
    }
  }
  return y;
}

void expect_matches(const Tensor& y, const std::vector<double>& ref, double tol, const std::string& what) {
  const std::vector<double> v = y.to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], ref[i], tol * (1 + std::abs(ref[i]))) << what << " " << i;
}

TEST(GroupNorm, ForwardMatchesTheDefinition) {
  struct Case {
    Shape x;
    int64_t groups;
  };
  for (const Case& c : {Case{{2, 8, 5, 3}, 4}, Case{{1, 6, 7}, 3}, Case{{3, 4, 2, 2, 2}, 1},
                        Case{{2, 5, 3, 3}, 5}, Case{{1, 64, 16, 16}, 32}}) {
    const int64_t ch = c.x[1];
    Tensor x = rand_f32(c.x, 1, -2, 3), w = rand_f32({ch}, 2), b = rand_f32({ch}, 3);
    const std::string what = shape_str(c.x);
    expect_matches(ops::group_norm(x, c.groups, w, b, 1e-6), reference_group_norm(x, c.groups, w, b, 1e-6),
                   2e-6, what);
    expect_matches(ops::group_norm(x, c.groups, Tensor(), Tensor(), 1e-5),
                   reference_group_norm(x, c.groups, Tensor(), Tensor(), 1e-5), 2e-6, what + " plain");
    Tensor x64 = x.to(kF64);
    expect_matches(ops::group_norm(x64, c.groups, w.to(kF64), Tensor(), 1e-6),
                   reference_group_norm(x64, c.groups, w, Tensor(), 1e-6), 1e-12, what + " f64");
  }
}

TEST(GroupNorm, IsStableForALargeMean) {
  Tensor x = rand_f32({2, 4, 32, 32}, 5, 1000, 1001);
  expect_matches(ops::group_norm(x, 2, Tensor(), Tensor(), 1e-6),
                 reference_group_norm(x, 2, Tensor(), Tensor(), 1e-6), 2e-4, "offset 1000");
}

TEST(GroupNorm, GradientsMatchFiniteDifferences) {
  for (int64_t groups : {1, 2, 6}) {
    Tensor x = rand_f64({2, 6, 3, 4}, 10, true, -2, 2), w = rand_f64({6}, 11, true, 0.5, 1.5),
           b = rand_f64({6}, 12);
    auto res = gradcheck(
        [groups](auto& v) { return std::vector<Tensor>{ops::group_norm(v[0], groups, v[1], v[2], 1e-5)}; },
        {x, w, b});
    EXPECT_TRUE(res.ok) << groups << " groups: " << res.message;
    auto plain = gradcheck(
        [groups](auto& v) {
          return std::vector<Tensor>{ops::group_norm(v[0], groups, Tensor(), Tensor(), 1e-5)};
        },
        {rand_f64({2, 6, 5}, 13, true, -2, 2)});
    EXPECT_TRUE(plain.ok) << groups << " groups without affine: " << plain.message;
  }
}

TEST(GroupNorm, BadShapesAreClearErrors) {
  Tensor x = rand_f32({2, 6, 4, 4}, 20);
  EXPECT_TITAN_ERROR(ops::group_norm(x, 4, Tensor(), Tensor(), 1e-6), "group_norm", "4 groups",
                     "divisor of 6");
  EXPECT_TITAN_ERROR(ops::group_norm(x, 0, Tensor(), Tensor(), 1e-6), "group_norm");
  EXPECT_TITAN_ERROR(ops::group_norm(x, 2, rand_f32({4}, 21), Tensor(), 1e-6), "weight", "expected [6]");
  EXPECT_TITAN_ERROR(ops::group_norm(x, 2, Tensor(), rand_f64({6}, 22, false), 1e-6), "bias", "dtype");
  EXPECT_TITAN_ERROR(ops::group_norm(rand_f32({6}, 23), 2, Tensor(), Tensor(), 1e-6), "[N, C, *]");
}

}  // namespace
}  // namespace titan
