#include <gtest/gtest.h>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/upsample.h"

namespace titan {
namespace {

using test::rand_f32;
using test::rand_f64;

TEST(UpsampleNearest, CopiesEachPixelToItsBlock) {
  for (int64_t factor : {1, 2, 3}) {
    Tensor x = rand_f32({2, 3, 4, 5}, 1);
    Tensor y = ops::upsample_nearest(x, factor);
    ASSERT_EQ(y.sizes(), (Shape{2, 3, 4 * factor, 5 * factor}));
    const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < 4 * factor; ++i)
        for (int64_t j = 0; j < 5 * factor; ++j)
          ASSERT_EQ(yv[static_cast<size_t>((p * 4 * factor + i) * 5 * factor + j)],
                    xv[static_cast<size_t>((p * 4 + i / factor) * 5 + j / factor)])
              << "factor " << factor;
  }
}

TEST(UpsampleNearest, GradientsMatchFiniteDifferences) {
  for (int64_t factor : {1, 2, 3}) {
    auto res = autograd::gradcheck(
        [factor](auto& v) { return std::vector<Tensor>{ops::upsample_nearest(v[0], factor)}; },
        {rand_f64({2, 2, 3, 4}, 10)});
    EXPECT_TRUE(res.ok) << "factor " << factor << ": " << res.message;
  }
}

TEST(UpsampleNearest, BadInputsAreClearErrors) {
  EXPECT_TITAN_ERROR(ops::upsample_nearest(rand_f32({3, 4, 4}, 20), 2), "upsample_nearest", "[N, C, H, W]");
  EXPECT_TITAN_ERROR(ops::upsample_nearest(rand_f32({1, 3, 4, 4}, 21), 0), "upsample_nearest", "positive");
}

}  // namespace
}  // namespace titan
