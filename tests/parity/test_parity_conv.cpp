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

// Runs `op` on the case's inputs (absent ones undefined) and compares the output and every
// input's gradient.
template <typename Op>
void check_case(const std::string& name, const std::vector<std::string>& inputs, const Op& op) {
  const ParityCase c = load_parity_case(name);
  std::vector<Tensor> in;
  for (const std::string& i : inputs)
    in.push_back(c.file.tensors.count("in." + i) ? c.input("in." + i) : Tensor());
  Tensor y = op(c, in);
  EXPECT_TRUE(tensors_close(y, c["out.y"], kTol, name + " forward"));
  y.backward(c["cot.y"]);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!in[k].defined()) continue;
    EXPECT_TRUE(tensors_close(in[k].grad(), c["grad." + inputs[k]], kTol, name + " grad " + inputs[k]));
  }
}

int64_t int_attr(const ParityCase& c, const char* key) {
  return static_cast<int64_t>(c.attr(key));
}

TEST(ParityConv, Conv2d) {
  for (const char* name :
       {"conv2d_3x3", "conv2d_3x3_nobias", "conv2d_1x1", "conv2d_downsample", "conv2d_downsample_odd"}) {
    check_case(name, {"x", "w", "b"}, [](const ParityCase& c, const std::vector<Tensor>& in) {
      const ops::Conv2dOptions o{.stride = int_attr(c, "stride"),
                                 .pad_top = int_attr(c, "pad_top"),
                                 .pad_bottom = int_attr(c, "pad_bottom"),
                                 .pad_left = int_attr(c, "pad_left"),
                                 .pad_right = int_attr(c, "pad_right")};
      return ops::conv2d(in[0], in[1], in[2], o);
    });
  }
}

TEST(ParityConv, GroupNorm) {
  for (const char* name : {"group_norm_32", "group_norm_plain", "group_norm_offset"}) {
    check_case(name, {"x", "w", "b"}, [](const ParityCase& c, const std::vector<Tensor>& in) {
      return ops::group_norm(in[0], int_attr(c, "groups"), in[1], in[2], c.attr("eps"));
    });
  }
}

TEST(ParityConv, UpsampleNearest) {
  check_case("upsample_nearest_2", {"x"}, [](const ParityCase& c, const std::vector<Tensor>& in) {
    return ops::upsample_nearest(in[0], int_attr(c, "factor"));
  });
}

}  // namespace
}  // namespace titan::test
