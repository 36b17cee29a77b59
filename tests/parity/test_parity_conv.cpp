// titan vs PyTorch: conv2d, GroupNorm and nearest upsampling, the autoencoder's ops. f32 bound:
// 1e-5 relative (of the reference's max magnitude) for outputs and every input's gradient.
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/group_norm.h"
#include "titan/ops/upsample.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

int64_t int_attr(const ParityCase& c, const char* key) {
  return static_cast<int64_t>(c.attr(key));
}

TEST(ParityConv, Conv2d) {
  for (const char* name :
       {"conv2d_3x3", "conv2d_3x3_nobias", "conv2d_1x1", "conv2d_downsample", "conv2d_downsample_odd"}) {
    expect_op_parity(
        load_parity_case(name), name, {"x", "w", "b"},
        [](const ParityCase& c, const std::vector<Tensor>& in) {
          const ops::Conv2dOptions o{.stride = int_attr(c, "stride"),
                                     .pad_top = int_attr(c, "pad_top"),
                                     .pad_bottom = int_attr(c, "pad_bottom"),
                                     .pad_left = int_attr(c, "pad_left"),
                                     .pad_right = int_attr(c, "pad_right")};
          return ops::conv2d(in[0], in[1], in[2], o);
        },
        kTol);
  }
}

TEST(ParityConv, GroupNorm) {
  for (const char* name : {"group_norm_32", "group_norm_plain", "group_norm_offset"}) {
    expect_op_parity(
        load_parity_case(name), name, {"x", "w", "b"},
        [](const ParityCase& c, const std::vector<Tensor>& in) {
          return ops::group_norm(in[0], int_attr(c, "groups"), in[1], in[2], c.attr("eps"));
        },
        kTol);
  }
}

TEST(ParityConv, UpsampleNearest) {
  expect_op_parity(
      load_parity_case("upsample_nearest_2"), "upsample_nearest_2", {"x"},
      [](const ParityCase& c, const std::vector<Tensor>& in) {
        return ops::upsample_nearest(in[0], int_attr(c, "factor"));
      },
      kTol);
}

}  // namespace
}  // namespace titan::test
