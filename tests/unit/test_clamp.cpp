#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

TEST(Clamp, ForwardLimitsEveryElementToTheBounds) {
  const Tensor x = test::rand_f32({4, 33}, 1, -50, 50);
  const std::vector<float> in = x.to_vector<float>(), out = ops::clamp(x, -30, 20).to_vector<float>();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], std::min(std::max(in[i], -30.0f), 20.0f)) << i;
  // A strided input (a transposed view) reads the same elements.
  const Tensor t = ops::clamp(x.transpose(0, 1), -30, 20);
  EXPECT_TRUE(test::same_bits(t.transpose(0, 1).contiguous(), ops::clamp(x, -30, 20)));
}

TEST(Clamp, GradientPassesInsideTheBoundsOnly) {
  // Away from the bounds, so central differences do not straddle a kink.
  Tensor x = Tensor::from_vector<double>({-3.0, -1.5, -0.2, 0.4, 1.1, 2.7}, {2, 3});
  x.requires_grad_();
  auto res = autograd::gradcheck(
      [](const auto& v) { return std::vector<Tensor>{ops::clamp(v[0], -1.0, 1.5)}; }, {x});
  EXPECT_TRUE(res.ok) << res.message;
  Tensor y = ops::clamp(x, -1.0, 1.5);
  ops::sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 1, 1, 1, 0}));
}

TEST(Clamp, RefusesEmptyRange) {
  EXPECT_TITAN_ERROR(ops::clamp(test::rand_f32({2}, 1), 1.0, -1.0), "lo <= hi");
}

}  // namespace
}  // namespace titan
