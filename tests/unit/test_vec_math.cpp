#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace titan::kernels::cpu
