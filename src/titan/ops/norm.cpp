#include "titan/ops/norm.h"

#include <initializer_list>
#include <utility>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/norm.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

// x viewed as [rows, d]: d is the normalised last dim.
struct Rows {
  int64_t rows, d;
};
using NamedParam = std::pair<const char*, const Tensor*>;

// Checks x and its optional per-feature parameters (undefined ones are skipped).
Rows check_inputs(const char* op, const Tensor& x, std::initializer_list<NamedParam> params, double eps) {
  check_float(op, "x", x);
  TITAN_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x ", x.desc(),
              " needs a non-empty last dim to normalise over");
  TITAN_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  const int64_t d = x.size(-1);
  for (const auto& [name, p] : params) {
    if (!p->defined()) continue;
    check_cpu(op, *p);
    TITAN_CHECK(p->dim() == 1 && p->size(0) == d, op, ": ", name, " ", p->desc(),
                " does not match the last dim of x ", x.desc(), "; expected [", d, "]");
    TITAN_CHECK(p->dtype() == x.dtype(), op, ": ", name, " ", p->desc(), " and x ", x.desc(),
                " differ in dtype; cast one with .to()");
  }
  return {x.numel() / d, d};
}

// An input as the kernels read it and backward keeps it: contiguous, detached; undefined stays so.
Tensor saved(const Tensor& t) {
  return t.defined() ? dense(t) : Tensor();
}
Tensor empty_if(bool want, const Shape& sizes, TensorOptions opts) {
  return want ? Tensor::empty(sizes, opts) : Tensor();
}
template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const OpSpan span("rms_norm", x, weight);
  const auto [rows, d] = check_inputs("rms_norm", x, {{"weight", &weight}}, eps);
  Tensor xc = saved(x), wc = saved(weight);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  Tensor rstd = Tensor::empty({rows}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::rms_norm_fwd<T>(xc.data<T>(), ptr<T>(wc), out.data<T>(), rstd.data<T>(), rows, d, eps);
  });
  autograd::record("rms_norm", {x, weight}, {out}, [xc, wc, rstd, rows, d](const autograd::GradContext& g) {
    Tensor gy = g[0].contiguous();
    Tensor dx = empty_if(g.needs(0), xc.sizes(), xc.options()), dw = empty_if(g.needs(1), {d}, xc.options());
    kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::rms_norm_bwd<T>(gy.data<T>(), xc.data<T>(), ptr<T>(wc), rstd.data<T>(), ptr<T>(dx),
                                    ptr<T>(dw), rows, d);
    });
    return std::vector<Tensor>{dx, dw};
  });
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const OpSpan span("layer_norm", x, weight, bias);
  const auto [rows, d] = check_inputs("layer_norm", x, {{"weight", &weight}, {"bias", &bias}}, eps);
  Tensor xc = saved(x), wc = saved(weight), bc = saved(bias);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  Tensor mean = Tensor::empty({rows}, x.options()), rstd = Tensor::empty({rows}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::layer_norm_fwd<T>(xc.data<T>(), ptr<T>(wc), ptr<T>(bc), out.data<T>(), mean.data<T>(),
                                    rstd.data<T>(), rows, d, eps);
  });
  autograd::record(
      "layer_norm", {x, weight, bias}, {out}, [xc, wc, mean, rstd, rows, d](const autograd::GradContext& g) {
        Tensor gy = g[0].contiguous();
        Tensor dx = empty_if(g.needs(0), xc.sizes(), xc.options());
        Tensor dw = empty_if(g.needs(1), {d}, xc.options()), db = empty_if(g.needs(2), {d}, xc.options());
        kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
          using T = decltype(z);
          kernels::cpu::layer_norm_bwd<T>(gy.data<T>(), xc.data<T>(), ptr<T>(wc), mean.data<T>(),
                                          rstd.data<T>(), ptr<T>(dx), ptr<T>(dw), ptr<T>(db), rows, d);
        });
        return std::vector<Tensor>{dx, dw, db};
      });
  return out;
}

}  // namespace titan::ops
