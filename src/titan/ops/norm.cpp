#include "titan/ops/norm.h"

#include <initializer_list>
#include <optional>
#include <utility>

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/norm.h"
#include "titan/ops/checks.h"
#include "titan/ops/custom_calls.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

// x viewed as [rows, d]: d is the normalised last dim.
struct Rows {
  int64_t rows, d;
};
using NamedParam = std::pair<const char*, const Tensor*>;

// Checks x and its optional per-feature parameters (undefined ones are skipped). Lazy operands
// are values of the step being captured: their device is the program's, not checked here.
Rows check_inputs(const char* op, const Tensor& x, std::initializer_list<NamedParam> params, double eps,
                  bool lazy) {
  if (!lazy) check_cpu(op, x);
  TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, op, ": x must be f32 or f64, got ", x.desc());
  TITAN_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x ", x.desc(),
              " needs a non-empty last dim to normalise over");
  TITAN_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  const int64_t d = x.size(-1);
  for (const auto& [name, p] : params) {
    if (!p->defined()) continue;
    if (!lazy) check_cpu(op, *p);
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

namespace hlo = graph::hlo;

// The mean over the last dim, kept as a dim of size 1.
graph::Value last_mean(const graph::Value& v) {
  const auto last = static_cast<int64_t>(v.shape.size()) - 1;
  return hlo::mul(hlo::sum_keep(v, last), 1.0 / static_cast<double>(v.shape.back()));
}
graph::Value wide(const graph::Value& v, const Shape& shape) {
  return hlo::broadcast_to(v, shape);
}
// [..., d] summed over everything but d: the per-feature parameters' gradients.
graph::Value sum_rows(const graph::Value& v) {
  const int64_t d = v.shape.back();
  return hlo::reduce_sum(hlo::reshape(v, {numel_of(v.shape) / d, d}), {0});
}
graph::Value lazy_param(const Tensor& p, const Shape& shape, const char* op) {
  return wide(graph::value_of(p, op), shape);
}

// RMSNorm as custom calls to its kernels (ops/custom_calls.h), where the program allows them.
Tensor rms_norm_called(const Tensor& x, const Tensor& weight, double eps) {
  const graph::Value xv = graph::value_of(x, "rms_norm"), wv = graph::value_of(weight, "rms_norm");
  const std::vector<graph::Value> fwd = rms_norm_fwd_call(xv, wv, eps);
  Tensor out = graph::tensor_of(fwd[0]);
  if (!autograd::needs_grad({&x, &weight})) return out;
  autograd::record("rms_norm", {x, weight}, {out}, [xv, wv, rstd = fwd[1]](const autograd::GradContext& g) {
    const std::vector<graph::Value> d = rms_norm_bwd_call(graph::value_of(g[0], "rms_norm backward"), xv, wv, rstd);
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(d[0]) : Tensor(),
                               g.needs(1) ? graph::tensor_of(d[1]) : Tensor()};
  });
  return out;
}

// LayerNorm as custom calls to its kernels, where the program allows them.
Tensor layer_norm_called(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const graph::Value xv = graph::value_of(x, "layer_norm");
  std::optional<graph::Value> wv, bv;
  if (weight.defined()) wv = graph::value_of(weight, "layer_norm");
  if (bias.defined()) bv = graph::value_of(bias, "layer_norm");
  const std::vector<graph::Value> fwd =
      layer_norm_fwd_call(xv, wv ? &*wv : nullptr, bv ? &*bv : nullptr, eps);
  Tensor out = graph::tensor_of(fwd[0]);
  if (!autograd::needs_grad({&x, &weight, &bias})) return out;
  autograd::record(
      "layer_norm", {x, weight, bias}, {out},
      [xv, wv, has_bias = bv.has_value(), mean = fwd[1], rstd = fwd[2]](const autograd::GradContext& g) {
        const std::vector<graph::Value> d = layer_norm_bwd_call(
            graph::value_of(g[0], "layer_norm backward"), xv, wv ? &*wv : nullptr, has_bias, mean, rstd);
        const size_t db = d.size() - 1;
        return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(d[0]) : Tensor(),
                                   wv && g.needs(1) ? graph::tensor_of(d[1]) : Tensor(),
                                   has_bias && g.needs(2) ? graph::tensor_of(d[db]) : Tensor()};
      });
  return out;
}

// The lowerings keep the statistics [..., 1] (what the kernels keep as [rows]) for backward, in x's
// dtype as the kernels do.
Tensor rms_norm_lowered(const Tensor& x, const Tensor& weight, double eps) {
  const graph::Value xv = graph::value_of(x, "rms_norm");
  const graph::Value rstd = hlo::rsqrt(hlo::add(last_mean(hlo::mul(xv, xv)), eps));
  graph::Value y = hlo::mul(xv, wide(rstd, xv.shape));
  if (weight.defined()) y = hlo::mul(y, lazy_param(weight, xv.shape, "rms_norm"));
  Tensor out = graph::tensor_of(y);
  Tensor xd = x.detach(), wd = weight.defined() ? weight.detach() : Tensor(), rd = graph::tensor_of(rstd);
  autograd::record("rms_norm", {x, weight}, {out}, [xd, wd, rd](const autograd::GradContext& g) {
    const graph::Value gy = graph::value_of(g[0], "rms_norm backward"), xv = graph::value_of(xd, "rms_norm");
    const graph::Value r = wide(graph::value_of(rd, "rms_norm"), xv.shape), xhat = hlo::mul(xv, r);
    const graph::Value gw = wd.defined() ? hlo::mul(gy, lazy_param(wd, xv.shape, "rms_norm")) : gy;
    // d/dx of x * r: r * (gw - xhat * mean(gw * xhat)), the second term through r's dependence on x.
    const graph::Value dx =
        hlo::mul(r, hlo::sub(gw, hlo::mul(xhat, wide(last_mean(hlo::mul(gw, xhat)), xv.shape))));
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(dx) : Tensor(),
                               g.needs(1) ? graph::tensor_of(sum_rows(hlo::mul(gy, xhat))) : Tensor()};
  });
  return out;
}

Tensor layer_norm_lowered(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const graph::Value xv = graph::value_of(x, "layer_norm");
  // As the kernel: the variance from the centred row (E[x^2] - mean^2 would cancel when
  // |mean| >> std), and the centred row's mean, zero but for the first mean's rounding error (of
  // the order of |mean| * eps), added back to mean and variance both (Chan, Golub & LeVeque).
  const graph::Value first = last_mean(xv);
  const graph::Value xc = hlo::sub(xv, wide(first, xv.shape));
  const graph::Value shift = last_mean(xc);
  const graph::Value var = hlo::max(hlo::sub(last_mean(hlo::mul(xc, xc)), hlo::mul(shift, shift)),
                                    hlo::constant(0.0, shift.shape, shift.dtype));
  const graph::Value mean = hlo::add(first, shift);
  const graph::Value rstd = hlo::rsqrt(hlo::add(var, eps));
  graph::Value y = hlo::mul(hlo::sub(xv, wide(mean, xv.shape)), wide(rstd, xv.shape));
  if (weight.defined()) y = hlo::mul(y, lazy_param(weight, xv.shape, "layer_norm"));
  if (bias.defined()) y = hlo::add(y, lazy_param(bias, xv.shape, "layer_norm"));
  Tensor out = graph::tensor_of(y);
  Tensor xd = x.detach(), wd = weight.defined() ? weight.detach() : Tensor();
  Tensor md = graph::tensor_of(mean), rd = graph::tensor_of(rstd);
  autograd::record("layer_norm", {x, weight, bias}, {out}, [xd, wd, md, rd](const autograd::GradContext& g) {
    const graph::Value gy = graph::value_of(g[0], "layer_norm backward"),
                       xv = graph::value_of(xd, "layer_norm");
    const graph::Value r = wide(graph::value_of(rd, "layer_norm"), xv.shape);
    const graph::Value xhat = hlo::mul(hlo::sub(xv, wide(graph::value_of(md, "layer_norm"), xv.shape)), r);
    const graph::Value gw = wd.defined() ? hlo::mul(gy, lazy_param(wd, xv.shape, "layer_norm")) : gy;
    // r * (gw - mean(gw) - xhat * mean(gw * xhat)): the mean's and the rstd's dependence on x.
    const graph::Value centred = hlo::sub(gw, wide(last_mean(gw), xv.shape));
    const graph::Value dx =
        hlo::mul(r, hlo::sub(centred, hlo::mul(xhat, wide(last_mean(hlo::mul(gw, xhat)), xv.shape))));
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(dx) : Tensor(),
                               g.needs(1) ? graph::tensor_of(sum_rows(hlo::mul(gy, xhat))) : Tensor(),
                               g.needs(2) ? graph::tensor_of(sum_rows(gy)) : Tensor()};
  });
  return out;
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const OpSpan span("rms_norm", x, weight);
  const bool lazy = graph::any_lazy({&x, &weight});
  const auto [rows, d] = check_inputs("rms_norm", x, {{"weight", &weight}}, eps, lazy);
  if (lazy && weight.defined() && graph::current_program().custom_kernels()) return rms_norm_called(x, weight, eps);
  if (lazy) return rms_norm_lowered(x, weight, eps);
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
  const bool lazy = graph::any_lazy({&x, &weight, &bias});
  const auto [rows, d] = check_inputs("layer_norm", x, {{"weight", &weight}, {"bias", &bias}}, eps, lazy);
  if (lazy && graph::current_program().custom_kernels()) return layer_norm_called(x, weight, bias, eps);
  if (lazy) return layer_norm_lowered(x, weight, bias, eps);
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
