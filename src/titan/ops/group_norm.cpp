#include "titan/ops/group_norm.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/group_norm.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

void check_param(const char* name, const Tensor& p, const Tensor& x) {
  if (!p.defined()) return;
  if (!x.is_lazy()) check_cpu("group_norm", p);
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

namespace hlo = graph::hlo;

// The mean over the last dim of [N, G, D], kept as a dim of size 1, broadcast back.
graph::Value group_mean(const graph::Value& v) {
  return hlo::broadcast_to(hlo::mul(hlo::sum_keep(v, 2), 1.0 / static_cast<double>(v.shape[2])), v.shape);
}
// A per-channel parameter [C] broadcast over x's shape [N, C, *].
graph::Value per_channel(const Tensor& p, const Shape& shape) {
  return hlo::broadcast_in_dim(graph::value_of(p, "group_norm"), shape, {1});
}

// As the kernel: x viewed as [N, G, D], the variance from the centred values; backward
// rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per group, gw = dy * weight.
Tensor group_norm_lowered(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                          double eps) {
  const Shape shape = x.sizes(),
              grouped{x.size(0), groups, x.numel() / std::max<int64_t>(1, x.size(0) * groups)};
  const graph::Value xv = hlo::reshape(graph::value_of(x, "group_norm"), grouped);
  const graph::Value xc = hlo::sub(xv, group_mean(xv));
  const graph::Value rstd = hlo::rsqrt(hlo::add(group_mean(hlo::mul(xc, xc)), eps));
  const graph::Value xhat = hlo::mul(xc, rstd);
  graph::Value y = hlo::reshape(xhat, shape);
  if (weight.defined()) y = hlo::mul(y, per_channel(weight, shape));
  if (bias.defined()) y = hlo::add(y, per_channel(bias, shape));
  Tensor out = graph::tensor_of(y);
  Tensor wd = weight.defined() ? weight.detach() : Tensor(), hd = graph::tensor_of(xhat),
         rd = graph::tensor_of(rstd);
  autograd::record(
      "group_norm", {x, weight, bias}, {out}, [wd, hd, rd, shape, grouped](const autograd::GradContext& g) {
        const graph::Value dy = graph::value_of(g[0], "group_norm backward");
        const graph::Value xhat = graph::value_of(hd, "group_norm"), r = graph::value_of(rd, "group_norm");
        const graph::Value gw =
            hlo::reshape(wd.defined() ? hlo::mul(dy, per_channel(wd, shape)) : dy, grouped);
        const graph::Value dx = hlo::mul(
            r, hlo::sub(hlo::sub(gw, group_mean(gw)), hlo::mul(xhat, group_mean(hlo::mul(gw, xhat)))));
        // Everything but the channel dim summed: the per-channel parameters' gradients.
        Shape others{0};
        for (int64_t d = 2; d < static_cast<int64_t>(shape.size()); ++d) others.push_back(d);
        return std::vector<Tensor>{
            g.needs(0) ? graph::tensor_of(hlo::reshape(dx, shape)) : Tensor(),
            g.needs(1) ? graph::tensor_of(hlo::reduce_sum(hlo::mul(dy, hlo::reshape(xhat, shape)), others))
                       : Tensor(),
            g.needs(2) ? graph::tensor_of(hlo::reduce_sum(dy, others)) : Tensor()};
      });
  return out;
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  const OpSpan span("group_norm", x, weight, bias);
  const bool lazy = graph::any_lazy({&x, &weight, &bias});
  if (lazy)
    TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, "group_norm: x must be f32 or f64, got ", x.desc());
  else
    check_float("group_norm", "x", x);
  TITAN_CHECK(x.dim() >= 2, "group_norm: x must be [N, C, *], got ", x.desc());
  TITAN_CHECK(groups >= 1 && x.size(1) % groups == 0, "group_norm: ", groups,
              " groups do not divide the channels of x ", x.desc(), " (dim 1); pick a divisor of ",
              x.size(1));
  TITAN_CHECK(eps >= 0, "group_norm: eps must be non-negative, got ", eps);
  check_param("weight", weight, x);
  check_param("bias", bias, x);
  if (lazy) return group_norm_lowered(x, groups, weight, bias, eps);
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
