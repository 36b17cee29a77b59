#include <gtest/gtest.h>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using autograd::gradcheck;
using ops::Conv2dOptions;
using test::rand_f32;
using test::rand_f64;

// The definition in double, one output element at a time.
std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + o.pad_top + o.pad_bottom - kh) / o.stride + 1;
  const int64_t ow = (wd + o.pad_left + o.pad_right - kw) / o.stride + 1;
  std::vector<double> y;
  for (int64_t b0 = 0; b0 < n; ++b0)
    for (int64_t k = 0; k < oc; ++k)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bv.empty() ? 0 : bv[static_cast<size_t>(k)];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                const int64_t iy = i * o.stride - o.pad_top + u, ix = j * o.stride - o.pad_left + v;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += xv[static_cast<size_t>(((b0 * c + ci) * h + iy) * wd + ix)] *
                     wv[static_cast<size_t>(((k * c + ci) * kh + u) * kw + v)];
              }
          y.push_back(s);
        }
  return y;
}

struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
};

// The autoencoder's convolutions (3x3 pad 1, 1x1, 3x3 stride 2 padded 0 top/left and 1
// bottom/right) and odd sizes around them.
const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"3x3 pad 1", {2, 3, 7, 9}, {5, 3, 3, 3}, {.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1}},
      {"1x1", {2, 6, 5, 4}, {3, 6, 1, 1}, {}},
      {"3x3 stride 2 pad (0,1,0,1)", {1, 4, 8, 8}, {6, 4, 3, 3}, {.stride = 2, .pad_bottom = 1, .pad_right = 1}},
      {"3x3 stride 2 odd size", {2, 2, 7, 6}, {3, 2, 3, 3}, {.stride = 2, .pad_bottom = 1, .pad_right = 1}},
      {"2x3 kernel no padding", {1, 3, 6, 5}, {2, 3, 2, 3}, {}},
      {"1x1 stride 2", {1, 3, 5, 5}, {2, 3, 1, 1}, {.stride = 2}},
  };
  return all;
}

TEST(Conv2d, ForwardMatchesTheDefinition) {
  for (const Case& c : cases()) {
    for (bool with_bias : {true, false}) {
      Tensor x = rand_f32(c.x, 1), w = rand_f32(c.w, 2), b = with_bias ? rand_f32({c.w[0]}, 3) : Tensor();
      Tensor y = ops::conv2d(x, w, b, c.o);
      const std::vector<double> ref = reference_conv(x, w, b, c.o);
      const std::vector<double> got = y.to_vector<double>();
      ASSERT_EQ(got.size(), ref.size()) << c.name;
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5) << c.name << " element " << i;
      Tensor x64 = x.to(kF64), w64 = w.to(kF64), b64 = with_bias ? b.to(kF64) : Tensor();
      const std::vector<double> got64 = ops::conv2d(x64, w64, b64, c.o).to_vector<double>();
      for (size_t i = 0; i < got64.size(); ++i) ASSERT_NEAR(got64[i], ref[i], 1e-12) << c.name << " f64 " << i;
    }
  }
}

TEST(Conv2d, OutputShapeFollowsTheAsymmetricPadding) {
  // diffusers' Downsample2D: F.pad(x, (0, 1, 0, 1)) then a 3x3 stride-2 conv halves 256 to 128.
  Tensor y = ops::conv2d(rand_f32({1, 2, 16, 16}, 4), rand_f32({3, 2, 3, 3}, 5), Tensor(),
                         {.stride = 2, .pad_bottom = 1, .pad_right = 1});
  EXPECT_EQ(y.sizes(), (Shape{1, 3, 8, 8}));
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    Tensor x = rand_f64(c.x, 10), w = rand_f64(c.w, 11), b = rand_f64({c.w[0]}, 12);
    const Conv2dOptions o = c.o;
    auto res = gradcheck([o](auto& v) { return std::vector<Tensor>{ops::conv2d(v[0], v[1], v[2], o)}; }, {x, w, b});
    EXPECT_TRUE(res.ok) << c.name << ": " << res.message;
    auto nobias = gradcheck([o](auto& v) { return std::vector<Tensor>{ops::conv2d(v[0], v[1], Tensor(), o)}; },
                            {rand_f64(c.x, 13), rand_f64(c.w, 14)});
    EXPECT_TRUE(nobias.ok) << c.name << " without bias: " << nobias.message;
  }
}

TEST(Conv2d, OnlyTheAskedGradientsAreComputed) {
  Tensor x = rand_f64({1, 2, 5, 5}, 20, false), w = rand_f64({3, 2, 3, 3}, 21), b = rand_f64({3}, 22, false);
  Tensor y = ops::conv2d(x, w, b, {.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1});
  ops::sum(y).backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
}

TEST(Conv2d, BadShapesAreClearErrors) {
  Tensor x = rand_f32({1, 3, 4, 4}, 30), w = rand_f32({2, 3, 3, 3}, 31);
  EXPECT_TITAN_ERROR(ops::conv2d(rand_f32({3, 4, 4}, 32), w, Tensor(), {}), "conv2d", "[N, C, H, W]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, rand_f32({2, 4, 3, 3}, 33), Tensor(), {}), "conv2d", "weight",
                     "[O, 3, kh, kw]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, rand_f32({3}, 34), {}), "conv2d", "bias", "[2]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, Tensor(), {.stride = 0}), "stride");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, Tensor(), {.pad_left = -1}), "padding");
  EXPECT_TITAN_ERROR(ops::conv2d(rand_f32({1, 3, 2, 2}, 35), w, Tensor(), {}), "larger than the padded input");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w.to(kF64), Tensor(), {}), "differ in dtype");
}

}  // namespace
}  // namespace titan
