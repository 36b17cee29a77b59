#include "titan/ops/conv2d.h"

#include <type_traits>

#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/conv2d.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/onednn_conv2d.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

using kernels::cpu::Conv2dGeometry;

Conv2dGeometry geometry(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  TITAN_CHECK(x.dim() == 4, "conv2d: x must be [N, C, H, W], got ", x.desc());
  TITAN_CHECK(weight.dim() == 4 && weight.size(1) == x.size(1), "conv2d: weight ", weight.desc(),
              " does not match x ", x.desc(), "; expected [O, ", x.size(1), ", kh, kw]");
  TITAN_CHECK(x.dtype() == weight.dtype(), "conv2d: x ", x.desc(), " and weight ", weight.desc(),
              " differ in dtype; cast one with .to()");
  TITAN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "conv2d: bias ",
              bias.desc(), " does not match weight ", weight.desc(), "; expected [", weight.size(0), "]");
  TITAN_CHECK(o.stride >= 1, "conv2d: stride must be at least 1, got ", o.stride);
  TITAN_CHECK(o.pad_top >= 0 && o.pad_bottom >= 0 && o.pad_left >= 0 && o.pad_right >= 0,
              "conv2d: padding must be non-negative, got top ", o.pad_top, " bottom ", o.pad_bottom, " left ",
              o.pad_left, " right ", o.pad_right);
  const Conv2dGeometry g{x.size(0),      x.size(1), x.size(2), x.size(3),    weight.size(0), weight.size(2),
                         weight.size(3), o.stride,  o.pad_top, o.pad_bottom, o.pad_left,     o.pad_right};
  TITAN_CHECK(g.h + g.pad_top + g.pad_bottom >= g.kh && g.w + g.pad_left + g.pad_right >= g.kw,
              "conv2d: the ", g.kh, "x", g.kw, " kernel of weight ", weight.desc(),
              " is larger than the padded input x ", x.desc(), " (padding top ", g.pad_top, " bottom ",
              g.pad_bottom, " left ", g.pad_left, " right ", g.pad_right, ")");
  TITAN_CHECK(g.c > 0 && g.o > 0, "conv2d: x ", x.desc(), " and weight ", weight.desc(),
              " need at least one input and one output channel");
  return g;
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// bf16 operands (or f32 ones multiplied in bf16) give a float32 result.
DType result_dtype(DType stored) {
  return stored == kBF16 ? kF32 : stored;
}

// oneDNN runs f32 and bf16, im2col f64 and the f32 cases oneDNN has no implementation for; bf16
// without one is refused. bench/conv_groupnorm.cpp measures the two paths on f32.
bool needs_im2col(bool onednn_ran, bool bf16, const char* what) {
  TITAN_CHECK(onednn_ran || !bf16, "conv2d: oneDNN has no bf16 ", what,
              " on this CPU (bf16 convolutions need AVX512-BF16 or AMX); convolve in float32 here");
  return !onednn_ran;
}

using kernels::cpu::ConvCompute;

// f32 and bf16 operands through oneDNN (T float or bf16, as stored), f64 through im2col.
template <typename T>
void forward(const Conv2dGeometry& g, ConvCompute compute, const Tensor& xc, const Tensor& wc,
             const Tensor& bc, const Tensor& out) {
  if constexpr (std::is_same_v<T, double>) {
    kernels::cpu::conv2d_fwd_im2col<T>(g, xc.data<T>(), wc.data<T>(), ptr<T>(bc), out.data<T>());
  } else {
    const bool ran = kernels::cpu::onednn_conv2d_fwd<T>(g, compute, xc.data<T>(), wc.data<T>(),
                                                        ptr<float>(bc), out.data<float>());
    if (needs_im2col(ran, compute == ConvCompute::bf16, "convolution"))
      if constexpr (std::is_same_v<T, float>)
        kernels::cpu::conv2d_fwd_im2col<T>(g, xc.data<T>(), wc.data<T>(), ptr<T>(bc), out.data<T>());
  }
}

template <typename T>
void backward(const Conv2dGeometry& g, ConvCompute compute, const Tensor& dy, const Tensor& xc,
              const Tensor& wc, const Tensor& dx, const Tensor& dw) {
  if constexpr (std::is_same_v<T, double>) {
    if (dx.defined()) kernels::cpu::conv2d_bwd_data_im2col<T>(g, dy.data<T>(), wc.data<T>(), dx.data<T>());
    if (dw.defined())
      kernels::cpu::conv2d_bwd_weight_im2col<T>(g, dy.data<T>(), xc.data<T>(), dw.data<T>(), nullptr);
  } else {
    const bool ran = kernels::cpu::onednn_conv2d_bwd<T>(g, compute, dy.data<T>(), xc.data<T>(), wc.data<T>(),
                                                        ptr<float>(dx), ptr<float>(dw));
    if (needs_im2col(ran, compute == ConvCompute::bf16, "backward"))
      if constexpr (std::is_same_v<T, float>) {
        if (dx.defined())
          kernels::cpu::conv2d_bwd_data_im2col<T>(g, dy.data<T>(), wc.data<T>(), dx.data<T>());
        if (dw.defined())
          kernels::cpu::conv2d_bwd_weight_im2col<T>(g, dy.data<T>(), xc.data<T>(), dw.data<T>(), nullptr);
      }
  }
}

namespace hlo = graph::hlo;

// The lowering: one stablehlo.convolution each way. dx is the transposed convolution (dy dilated
// by the stride, the kernel flipped, its in and out channels swapped); dw convolves x with dy as
// the kernel (dilated by the stride), images as the contracted channels. Graph mode keeps x's
// dtype (f32 or f64): autocast's bf16 is eager's alone here.
Tensor conv2d_lowered(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const graph::Value xv = graph::value_of(x, "conv2d"), wv = graph::value_of(weight, "conv2d");
  const hlo::ConvWindow window{.strides = {g.stride, g.stride},
                               .pad_low = {g.pad_top, g.pad_left},
                               .pad_high = {g.pad_bottom, g.pad_right}};
  graph::Value y = hlo::convolution(xv, wv, "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", window,
                                    {g.n, g.o, g.oh(), g.ow()}, x.dtype());
  if (bias.defined()) y = hlo::add(y, hlo::broadcast_in_dim(graph::value_of(bias, "conv2d"), y.shape, {1}));
  Tensor out = graph::tensor_of(y);
  autograd::record(
      "conv2d", {x, weight, bias}, {out},
      [xd = x.detach(), wd = weight.detach(), g](const autograd::GradContext& grads) {
        const graph::Value dy = graph::value_of(grads[0], "conv2d backward");
        const int64_t s = g.stride, oh = g.oh(), ow = g.ow();
        Tensor dx, dw, db;
        if (grads.needs(0)) {
          const hlo::ConvWindow t{
              .pad_low = {g.kh - 1 - g.pad_top, g.kw - 1 - g.pad_left},
              .pad_high = {g.h + g.pad_top - (oh - 1) * s - 1, g.w + g.pad_left - (ow - 1) * s - 1},
              .lhs_dilation = {s, s}};
          const graph::Value flipped = hlo::reverse(graph::value_of(wd, "conv2d"), {2, 3});
          dx = graph::tensor_of(hlo::convolution(dy, flipped, "[b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]", t,
                                                 {g.n, g.c, g.h, g.w}, dy.dtype));
        }
        if (grads.needs(1)) {
          const hlo::ConvWindow t{
              .pad_low = {g.pad_top, g.pad_left},
              .pad_high = {g.kh + (oh - 1) * s - g.h - g.pad_top, g.kw + (ow - 1) * s - g.w - g.pad_left},
              .rhs_dilation = {s, s}};
          dw = graph::tensor_of(hlo::convolution(graph::value_of(xd, "conv2d"), dy,
                                                 "[f, b, 0, 1]x[i, o, 0, 1]->[f, b, 0, 1]", t,
                                                 {g.o, g.c, g.kh, g.kw}, dy.dtype));
        }
        if (grads.needs(2)) db = graph::tensor_of(hlo::reduce_sum(dy, {0, 2, 3}));
        return std::vector<Tensor>{dx, dw, db};
      });
  return out;
}

template <typename F>
void dispatch_stored(DType stored, const F& f) {
  if (stored == kBF16)
    f(bf16{});
  else
    kernels::cpu::dispatch_float(stored, f);
}

}  // namespace

// Under autocast (core/autocast.h) f32 operands are multiplied in bf16 with float32 accumulation:
// oneDNN converts them while reordering them into its layout (one pass over them, not a
// conversion and then a reorder), in forward and for backward's dy likewise. Backward keeps x and
// the weight as they are (float32, where a bf16 copy would take half the memory but one more pass
// each way). The bias gradient sums the float32 output gradient.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const OpSpan span("conv2d", x, weight, bias);
  if (graph::any_lazy({&x, &weight, &bias})) {
    TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, "conv2d: x must be f32 or f64 in graph mode, got ",
                x.desc());
    TITAN_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "conv2d: bias ", bias.desc(), " and x ",
                x.desc(), " differ in dtype; cast one with .to()");
    return conv2d_lowered(x, weight, bias, geometry(x, weight, bias, options));
  }
  check_cpu("conv2d", x);
  check_cpu("conv2d", weight);
  if (bias.defined()) check_cpu("conv2d", bias);
  TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64 || x.dtype() == kBF16,
              "conv2d: x must be f32, f64 or bf16, got ", x.desc());
  const Conv2dGeometry g = geometry(x, weight, bias, options);
  const DType stored = x.dtype(), result = result_dtype(stored);
  const ConvCompute compute = matmul_operand_dtype(stored) == kBF16 ? ConvCompute::bf16 : ConvCompute::f32;
  TITAN_CHECK(!bias.defined() || bias.dtype() == result, "conv2d: bias ", bias.desc(), " must be ",
              dtype_name(result), ", the dtype of the result of x ", x.desc());
  Tensor xc = dense(x), wc = dense(weight), bc = bias.defined() ? dense(bias) : Tensor();
  Tensor out = Tensor::empty({g.n, g.o, g.oh(), g.ow()}, {.dtype = result});
  dispatch_stored(stored, [&](auto z) { forward<decltype(z)>(g, compute, xc, wc, bc, out); });
  autograd::record(
      "conv2d", {x, weight, bias}, {out}, [xc, wc, g, compute](const autograd::GradContext& grads) {
        const DType stored = xc.dtype(), result = result_dtype(stored);
        Tensor gy = grads[0].contiguous();
        Tensor dx = grads.needs(0) ? Tensor::empty({g.n, g.c, g.h, g.w}, {.dtype = result}) : Tensor();
        Tensor dw = grads.needs(1) ? Tensor::empty({g.o, g.c, g.kh, g.kw}, {.dtype = result}) : Tensor();
        Tensor db = grads.needs(2) ? Tensor::empty({g.o}, {.dtype = result}) : Tensor();
        if (dx.defined() || dw.defined()) {
          const Tensor dy = gy.dtype() == stored ? gy : gy.to(stored);
          dispatch_stored(stored, [&](auto z) { backward<decltype(z)>(g, compute, dy, xc, wc, dx, dw); });
        }
        if (db.defined())
          kernels::cpu::dispatch_float(result, [&](auto r) {
            using A = decltype(r);
            kernels::cpu::conv2d_bwd_weight_im2col<A>(g, gy.data<A>(), nullptr, nullptr, db.data<A>());
          });
        return std::vector<Tensor>{dx, dw, db};
      });
  return out;
}

}  // namespace titan::ops
