#include "titan/ops/group_norm.h"

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/group_norm.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

void check_param(const char* name, const Tensor& p, const Tensor& x) {
  if (!p.defined()) return;
  check_cpu("group_norm", p);
  TITAN_CHECK(p.dim() == 1 && p.size(0) == x.size(1), "group_norm: ", name, " ", p.desc(),
              " does not match the channels of x ", x.desc(), "; expected [", x.size(1), "]");
  TITAN_CHECK(p.dtype() == x.dtype(), "group_norm: ", name, " ", p.desc(), " and x ", x.desc(),
              " differ in dtype; cast one with .to()");
}

Tensor saved(const Tensor& t) {
  return t.defined() ? dense(t) : Tensor();
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  const OpSpan span("group_norm", x, weight, bias);
  check_float("group_norm", "x", x);
  TITAN_CHECK(x.dim() >= 2, "group_norm: x must be [N, C, *], got ", x.desc());
  TITAN_CHECK(groups >= 1 && x.size(1) % groups == 0, "group_norm: ", groups,
              " groups do not divide the channels of x ", x.desc(), " (dim 1); pick a divisor of ",
              x.size(1));
  TITAN_CHECK(eps >= 0, "group_norm: eps must be non-negative, got ", eps);
  check_param("weight", weight, x);
  check_param("bias", bias, x);
  const kernels::cpu::GroupNormShape shape{x.size(0), x.size(1),
                                           x.numel() / std::max<int64_t>(1, x.size(0) * x.size(1)), groups};
  Tensor xc = dense(x), wc = saved(weight), bc = saved(bias);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  Tensor mean = Tensor::empty({shape.n, groups}, x.options()),
         rstd = Tensor::empty({shape.n, groups}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::group_norm_fwd<T>(shape, xc.data<T>(), ptr<T>(wc), ptr<T>(bc), out.data<T>(),
                                    mean.data<T>(), rstd.data<T>(), eps);
  });
  autograd::record(
      "group_norm", {x, weight, bias}, {out}, [xc, wc, mean, rstd, shape](const autograd::GradContext& g) {
        Tensor gy = g[0].contiguous();
        auto grad = [&](size_t i, const Shape& sizes) {
          return g.needs(i) ? Tensor::empty(sizes, xc.options()) : Tensor();
        };
        Tensor dx = grad(0, xc.sizes()), dw = grad(1, {shape.c}), db = grad(2, {shape.c});
        kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
          using T = decltype(z);
          kernels::cpu::group_norm_bwd<T>(shape, gy.data<T>(), xc.data<T>(), ptr<T>(wc), mean.data<T>(),
                                          rstd.data<T>(), ptr<T>(dx), ptr<T>(dw), ptr<T>(db));
        });
        return std::vector<Tensor>{dx, dw, db};
      });
  return out;
}

}  // namespace titan::ops
