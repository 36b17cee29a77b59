#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "titan/kernels/cpu/vec_math.h"

namespace titan::kernels::cpu {
namespace {

TEST(VecMath, ExpMatchesLibmWithinAFewUlp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(exp_f32(x) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
}

TEST(VecMath, ExpEdgeCases) {
  EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_f32(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isinf(exp_f32(1000.0f)));
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
}

// Every length around the 64-byte vector (and its f64 half) and every position of the maximum.
template <typename T>
void expect_row_max_finds_the_largest() {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  EXPECT_EQ(row_max<T>(nullptr, 0), -kInf);
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 100}) {
    std::vector<T> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(-(i * 37 % 11) - 1);
    for (int64_t at = 0; at < n; ++at) {
      std::vector<T> y = x;
      y[at] = T(0.5);
      EXPECT_EQ(row_max(y.data(), n), T(0.5)) << "n " << n << ", max at " << at;
    }
    std::vector<T> lowest(static_cast<size_t>(n), -kInf);
    EXPECT_EQ(row_max(lowest.data(), n), -kInf) << n;
    // NaN entries are skipped; the rest still decide.
    std::vector<T> with_nan = x;
    with_nan[n / 2] = std::numeric_limits<T>::quiet_NaN();
    x[n / 2] = -kInf;
    EXPECT_EQ(row_max(with_nan.data(), n), *std::max_element(x.begin(), x.end())) << n;
  }
}

TEST(VecMath, RowMaxFindsTheLargestAtEveryLengthAndPosition) {
  expect_row_max_finds_the_largest<float>();
  expect_row_max_finds_the_largest<double>();
}

}  // namespace
}  // namespace titan::kernels::cpu
