#include "titan/ops/conv2d.h"

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/conv2d.h"
#include "titan/kernels/cpu/dispatch.h"
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
  TITAN_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "conv2d: bias ", bias.desc(), " and x ", x.desc(),
              " differ in dtype; cast one with .to()");
  TITAN_CHECK(o.stride >= 1, "conv2d: stride must be at least 1, got ", o.stride);
  TITAN_CHECK(o.pad_top >= 0 && o.pad_bottom >= 0 && o.pad_left >= 0 && o.pad_right >= 0,
              "conv2d: padding must be non-negative, got top ", o.pad_top, " bottom ", o.pad_bottom, " left ",
              o.pad_left, " right ", o.pad_right);
  const Conv2dGeometry g{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3),
                         o.stride, o.pad_top, o.pad_bottom, o.pad_left, o.pad_right};
  TITAN_CHECK(g.h + g.pad_top + g.pad_bottom >= g.kh && g.w + g.pad_left + g.pad_right >= g.kw, "conv2d: the ",
              g.kh, "x", g.kw, " kernel of weight ", weight.desc(), " is larger than the padded input x ", x.desc(),
              " (padding top ", g.pad_top, " bottom ", g.pad_bottom, " left ", g.pad_left, " right ", g.pad_right,
              ")");
  TITAN_CHECK(g.c > 0 && g.o > 0, "conv2d: x ", x.desc(), " and weight ", weight.desc(),
              " need at least one input and one output channel");
  return g;
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const OpSpan span("conv2d", x, weight, bias);
  check_float("conv2d", "x", x);
  check_float("conv2d", "weight", weight);
  if (bias.defined()) check_float("conv2d", "bias", bias);
  const Conv2dGeometry g = geometry(x, weight, bias, options);
  Tensor xc = dense(x), wc = dense(weight), bc = bias.defined() ? dense(bias) : Tensor();
  Tensor out = Tensor::empty({g.n, g.o, g.oh(), g.ow()}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::conv2d_fwd_im2col<T>(g, xc.data<T>(), wc.data<T>(), ptr<T>(bc), out.data<T>());
  });
  autograd::record("conv2d", {x, weight, bias}, {out}, [xc, wc, g](const autograd::GradContext& grads) {
    Tensor gy = grads[0].contiguous();
    Tensor dx = grads.needs(0) ? Tensor::empty(xc.sizes(), xc.options()) : Tensor();
    Tensor dw = grads.needs(1) ? Tensor::empty(wc.sizes(), wc.options()) : Tensor();
    Tensor db = grads.needs(2) ? Tensor::empty({g.o}, wc.options()) : Tensor();
    kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
      using T = decltype(z);
      if (dx.defined()) kernels::cpu::conv2d_bwd_data_im2col<T>(g, gy.data<T>(), wc.data<T>(), dx.data<T>());
      if (dw.defined() || db.defined())
        kernels::cpu::conv2d_bwd_weight_im2col<T>(g, gy.data<T>(), xc.data<T>(), ptr<T>(dw), ptr<T>(db));
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

}  // namespace titan::ops
