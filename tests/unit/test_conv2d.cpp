#include <gtest/gtest.h>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/onednn_conv2d.h"
#include "titan/ops/arith.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/group_norm.h"
#include "titan/ops/reduce.h"
#include "titan/ops/upsample.h"

namespace titan {
namespace {

using autograd::gradcheck;
using ops::Conv2dOptions;
using test::rand_f32;
using test::rand_f64;

// The definition in double, one output element at a time.
std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Conv2dOptions& o) {
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
      {"3x3 pad 1",
       {2, 3, 7, 9},
       {5, 3, 3, 3},
       {.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1}},
      {"1x1", {2, 6, 5, 4}, {3, 6, 1, 1}, {}},
      {"3x3 stride 2 pad (0,1,0,1)",
       {1, 4, 8, 8},
       {6, 4, 3, 3},
       {.stride = 2, .pad_bottom = 1, .pad_right = 1}},
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
      for (size_t i = 0; i < got64.size(); ++i)
        ASSERT_NEAR(got64[i], ref[i], 1e-12) << c.name << " f64 " << i;
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
    auto res =
        gradcheck([o](auto& v) { return std::vector<Tensor>{ops::conv2d(v[0], v[1], v[2], o)}; }, {x, w, b});
    EXPECT_TRUE(res.ok) << c.name << ": " << res.message;
    auto nobias =
        gradcheck([o](auto& v) { return std::vector<Tensor>{ops::conv2d(v[0], v[1], Tensor(), o)}; },
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

kernels::cpu::Conv2dGeometry geometry_of(const Case& c) {
  return {c.x[0], c.x[1],     c.x[2],      c.x[3],         c.w[0],       c.w[2],
          c.w[3], c.o.stride, c.o.pad_top, c.o.pad_bottom, c.o.pad_left, c.o.pad_right};
}

// oneDNN's primitives against the im2col path, which the tests above hold to the definition.
TEST(Conv2d, OneDnnMatchesIm2colInFloat32) {
  namespace k = kernels::cpu;
  for (const Case& c : cases()) {
    const k::Conv2dGeometry g = geometry_of(c);
    Tensor x = rand_f32(c.x, 40), w = rand_f32(c.w, 41), b = rand_f32({g.o}, 42);
    Tensor dy = rand_f32({g.n, g.o, g.oh(), g.ow()}, 43);
    Tensor y1 = Tensor::empty(dy.sizes()), y2 = Tensor::empty(dy.sizes());
    k::conv2d_fwd_im2col<float>(g, x.data<float>(), w.data<float>(), b.data<float>(), y1.data<float>());
    ASSERT_TRUE(k::onednn_conv2d_fwd<float>(g, k::ConvCompute::f32, x.data<float>(), w.data<float>(),
                                            b.data<float>(), y2.data<float>()))
        << c.name;
    EXPECT_TRUE(test::tensors_close(y2, y1, 1e-5, std::string(c.name) + " forward"));
    Tensor dx1 = Tensor::empty(c.x), dx2 = Tensor::empty(c.x), dw1 = Tensor::empty(c.w),
           dw2 = Tensor::empty(c.w);
    k::conv2d_bwd_data_im2col<float>(g, dy.data<float>(), w.data<float>(), dx1.data<float>());
    k::conv2d_bwd_weight_im2col<float>(g, dy.data<float>(), x.data<float>(), dw1.data<float>(), nullptr);
    ASSERT_TRUE(k::onednn_conv2d_bwd<float>(g, k::ConvCompute::f32, dy.data<float>(), x.data<float>(),
                                            w.data<float>(), dx2.data<float>(), dw2.data<float>()))
        << c.name;
    EXPECT_TRUE(test::tensors_close(dx2, dx1, 1e-5, std::string(c.name) + " backward data"));
    EXPECT_TRUE(test::tensors_close(dw2, dw1, 1e-5, std::string(c.name) + " backward weights"));
    // Either gradient alone.
    Tensor dx3 = Tensor::empty(c.x), dw3 = Tensor::empty(c.w);
    ASSERT_TRUE(k::onednn_conv2d_bwd<float>(g, k::ConvCompute::f32, dy.data<float>(), x.data<float>(),
                                            w.data<float>(), dx3.data<float>(), nullptr));
    ASSERT_TRUE(k::onednn_conv2d_bwd<float>(g, k::ConvCompute::f32, dy.data<float>(), x.data<float>(),
                                            w.data<float>(), nullptr, dw3.data<float>()));
    EXPECT_TRUE(test::same_bits(dx3, dx2)) << c.name;
    EXPECT_TRUE(test::same_bits(dw3, dw2)) << c.name;
  }
}

struct ConvRun {
  Tensor y, dx, dw, db;
};

ConvRun conv_run(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy,
                 const Conv2dOptions& o) {
  Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(), bl = b.detach().requires_grad_();
  Tensor y = ops::conv2d(xl, wl, bl, o);
  ops::sum(ops::mul(y, gy)).backward();
  return {y.detach(), xl.grad(), wl.grad(), bl.grad()};
}

Tensor rounded(const Tensor& t) {
  return t.to(kBF16).to(kF32);
}

// Under autocast: bf16 operands (the output gradient rounded too) with float32 accumulation, so the
// float32 convolution of the rounded operands to float32's precision, and the float32 convolution
// of the operands as they are to bf16's; the bias gradient sums the float32 output gradient.
TEST(Conv2d, Bf16UnderAutocastAccumulatesInFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
  for (const Case& c : cases()) {
    Tensor x = rand_f32(c.x, 50), w = rand_f32(c.w, 51), b = rand_f32({c.w[0]}, 52);
    const Tensor probe = ops::conv2d(x, w, b, c.o);
    Tensor gy = rand_f32(probe.sizes(), 53);
    ConvRun mixed;
    {
      const AutocastGuard bf16(kBF16);
      mixed = conv_run(x, w, b, gy, c.o);
    }
    const std::string name = c.name;
    EXPECT_EQ(mixed.y.dtype(), kF32);
    EXPECT_EQ(mixed.dx.dtype(), kF32);
    EXPECT_EQ(mixed.dw.dtype(), kF32);
    const ConvRun on_rounded = conv_run(rounded(x), rounded(w), b, rounded(gy), c.o);
    EXPECT_TRUE(test::tensors_close(mixed.y, on_rounded.y, 1e-5, name + " y"));
    EXPECT_TRUE(test::tensors_close(mixed.dx, on_rounded.dx, 1e-5, name + " dx"));
    EXPECT_TRUE(test::tensors_close(mixed.dw, on_rounded.dw, 1e-5, name + " dw"));
    const ConvRun f32 = conv_run(x, w, b, gy, c.o);
    EXPECT_TRUE(test::tensors_close(mixed.y, f32.y, 2e-2, name + " y against float32"));
    EXPECT_TRUE(test::tensors_close(mixed.dx, f32.dx, 2e-2, name + " dx against float32"));
    EXPECT_TRUE(test::tensors_close(mixed.dw, f32.dw, 2e-2, name + " dw against float32"));
    EXPECT_TRUE(test::tensors_close(mixed.db, f32.db, 1e-6, name + " db"));
  }
}

TEST(Conv2d, Bf16OperandsGiveAFloat32Result) {
  TITAN_SKIP_WITHOUT_BF16();
  Tensor x = rand_f32({1, 4, 6, 6}, 60), w = rand_f32({3, 4, 3, 3}, 61), b = rand_f32({3}, 62);
  const Conv2dOptions o{.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};
  Tensor y = ops::conv2d(x.to(kBF16), w.to(kBF16), b, o);
  EXPECT_EQ(y.dtype(), kF32);
  EXPECT_TRUE(test::tensors_close(y, ops::conv2d(rounded(x), rounded(w), b, o), 1e-5, "bf16 operands"));
  EXPECT_TITAN_ERROR(ops::conv2d(x.to(kBF16), w.to(kBF16), b.to(kBF16), o), "conv2d", "bias", "must be f32");
}

TEST(Conv2d, BadShapesAreClearErrors) {
  Tensor x = rand_f32({1, 3, 4, 4}, 30), w = rand_f32({2, 3, 3, 3}, 31);
  EXPECT_TITAN_ERROR(ops::conv2d(rand_f32({3, 4, 4}, 32), w, Tensor(), {}), "conv2d", "[N, C, H, W]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, rand_f32({2, 4, 3, 3}, 33), Tensor(), {}), "conv2d", "weight",
                     "[O, 3, kh, kw]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, rand_f32({3}, 34), {}), "conv2d", "bias", "[2]");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, Tensor(), {.stride = 0}), "stride");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w, Tensor(), {.pad_left = -1}), "padding");
  EXPECT_TITAN_ERROR(ops::conv2d(rand_f32({1, 3, 2, 2}, 35), w, Tensor(), {}),
                     "larger than the padded input");
  EXPECT_TITAN_ERROR(ops::conv2d(x, w.to(kF64), Tensor(), {}), "differ in dtype");
}

// Graph mode lowers conv2d to stablehlo.convolution, forward and backward, and agrees with eager.
TEST(Conv2d, GraphModeMatchesEager) {
  for (const Case& c : cases()) {
    const Conv2dOptions o = c.o;
    const test::GraphEager r = test::run_eager_and_graph(
        [o](const std::vector<Tensor>& v) { return std::vector<Tensor>{ops::conv2d(v[0], v[1], v[2], o)}; },
        {rand_f32(c.x, 70), rand_f32(c.w, 71), rand_f32({c.w[0]}, 72)});
    ASSERT_EQ(r.eager.size(), r.graph.size()) << c.name;
    for (size_t i = 0; i < r.eager.size(); ++i) {
      ASSERT_EQ(r.eager[i].sizes(), r.graph[i].sizes()) << c.name << " result " << i;
      EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 1e-5) << c.name << " result " << i;
    }
  }
}

// GroupNorm and nearest upsampling, the autoencoder's other ops, lowered too.
TEST(Conv2d, GraphModeLowersGroupNormAndUpsampling) {
  const test::GraphEager r = test::run_eager_and_graph(
      [](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{ops::group_norm(v[0], 4, v[1], v[2], 1e-6), ops::upsample_nearest(v[0], 2),
                                   ops::group_norm(v[0], 2, Tensor(), Tensor(), 1e-5)};
      },
      {rand_f32({2, 8, 5, 3}, 80, -2, 3), rand_f32({8}, 81), rand_f32({8}, 82)});
  ASSERT_EQ(r.eager.size(), r.graph.size());
  for (size_t i = 0; i < r.eager.size(); ++i) {
    ASSERT_EQ(r.eager[i].sizes(), r.graph[i].sizes()) << "result " << i;
    EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 1e-5) << "result " << i;
  }
}

}  // namespace
}  // namespace titan
