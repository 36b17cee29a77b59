#include "titan/ops/conv2d.h"

#include <type_traits>

#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/kernels/cpu/conv2d.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gemm.h"
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

// x's and the weight's dtype, one float type for both; bf16 operands give a float32 result.
DType result_dtype(DType operand) { return operand == kBF16 ? kF32 : operand; }

// x (or dy) as the convolution multiplies it: contiguous, detached, in `dtype`.
Tensor operand(const Tensor& t, DType dtype) { return autocast_cast(t, dtype).contiguous(); }

// oneDNN runs f32 and bf16, im2col f64 and the f32 cases oneDNN has no implementation for; bf16
// without one is refused. bench/conv_groupnorm.py measures the two paths on f32.
template <typename T>
constexpr bool kOneDnn = !std::is_same_v<T, double>;

template <typename T>
bool needs_im2col(bool onednn_ran, const char* what) {
  if constexpr (std::is_same_v<T, bf16>) {
    TITAN_CHECK(onednn_ran, "conv2d: oneDNN has no bf16 ", what,
                " on this CPU (bf16 convolutions need AVX512-BF16 or AMX); convolve in float32 here");
    return false;
  }
  return !onednn_ran;
}

Tensor forward(const Conv2dGeometry& g, const Tensor& xd, const Tensor& wd, const Tensor& bc) {
  Tensor out = Tensor::empty({g.n, g.o, g.oh(), g.ow()}, {.dtype = result_dtype(xd.dtype())});
  kernels::cpu::dispatch_matmul(xd.dtype(), [&](auto z) {
    using T = decltype(z);
    using R = kernels::cpu::gemm_acc_t<T>;
    bool ran = false;
    if constexpr (kOneDnn<T>)
      ran = kernels::cpu::onednn_conv2d_fwd<T>(g, xd.data<T>(), wd.data<T>(), ptr<float>(bc), out.data<float>());
    if (needs_im2col<T>(ran, "convolution"))
      if constexpr (!std::is_same_v<T, bf16>)
        kernels::cpu::conv2d_fwd_im2col<T>(g, xd.data<T>(), wd.data<T>(), ptr<R>(bc), out.data<R>());
  });
  return out;
}

}  // namespace

// Under autocast (core/autocast.h) x and the weight are convolved as bf16 copies, which backward
// keeps and convolves the bf16-rounded output gradient with; the bias gradient sums the float32
// output gradient.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const OpSpan span("conv2d", x, weight, bias);
  check_cpu("conv2d", x);
  check_cpu("conv2d", weight);
  if (bias.defined()) check_cpu("conv2d", bias);
  TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64 || x.dtype() == kBF16,
              "conv2d: x must be f32, f64 or bf16, got ", x.desc());
  const Conv2dGeometry g = geometry(x, weight, bias, options);
  const DType dtype = matmul_operand_dtype(x.dtype());
  TITAN_CHECK(!bias.defined() || bias.dtype() == result_dtype(dtype), "conv2d: bias ", bias.desc(),
              " must be ", dtype_name(result_dtype(dtype)), ", the dtype of the result of x ", x.desc());
  Tensor xd = operand(x, dtype), wd = operand(weight, dtype), bc = bias.defined() ? dense(bias) : Tensor();
  Tensor out = forward(g, xd, wd, bc);
  autograd::record("conv2d", {x, weight, bias}, {out}, [xd, wd, g](const autograd::GradContext& grads) {
    const DType acc = result_dtype(xd.dtype());
    Tensor gy = grads[0].contiguous(), go = operand(grads[0], xd.dtype());
    Tensor dx = grads.needs(0) ? Tensor::empty({g.n, g.c, g.h, g.w}, {.dtype = acc}) : Tensor();
    Tensor dw = grads.needs(1) ? Tensor::empty({g.o, g.c, g.kh, g.kw}, {.dtype = acc}) : Tensor();
    Tensor db = grads.needs(2) ? Tensor::empty({g.o}, {.dtype = acc}) : Tensor();
    kernels::cpu::dispatch_matmul(xd.dtype(), [&](auto z) {
      using T = decltype(z);
      using R = kernels::cpu::gemm_acc_t<T>;
      if (dx.defined()) {
        bool ran = false;
        if constexpr (kOneDnn<T>)
          ran = kernels::cpu::onednn_conv2d_bwd_data<T>(g, go.data<T>(), wd.data<T>(), dx.data<float>());
        if (needs_im2col<T>(ran, "backward data"))
          if constexpr (!std::is_same_v<T, bf16>)
            kernels::cpu::conv2d_bwd_data_im2col<T>(g, go.data<T>(), wd.data<T>(), dx.data<R>());
      }
      if (dw.defined()) {
        bool ran = false;
        if constexpr (kOneDnn<T>)
          ran = kernels::cpu::onednn_conv2d_bwd_weight<T>(g, go.data<T>(), xd.data<T>(), dw.data<float>());
        if (needs_im2col<T>(ran, "backward weights"))
          if constexpr (!std::is_same_v<T, bf16>)
            kernels::cpu::conv2d_bwd_weight_im2col<T>(g, go.data<T>(), xd.data<T>(), dw.data<R>(), nullptr);
      }
      if (db.defined())
        kernels::cpu::dispatch_float(acc, [&](auto r) {
          using A = decltype(r);
          kernels::cpu::conv2d_bwd_weight_im2col<A>(g, gy.data<A>(), nullptr, nullptr, db.data<A>());
        });
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

}  // namespace titan::ops
