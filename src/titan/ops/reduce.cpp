#include "titan/ops/reduce.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/reduce.h"
#include "titan/ops/arith.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
using kernels::cpu::ReduceOp;

struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_keep, out;
};

DimSplit split(const Tensor& x, int64_t dim) {
  DimSplit s;
  for (int64_t i = 0; i < x.dim(); ++i) {
    int64_t sz = x.sizes()[i];
    if (i < dim) s.outer *= sz;
    else if (i == dim) s.n = sz;
    else s.inner *= sz;
    s.out_keep.push_back(i == dim ? 1 : sz);
    if (i != dim) s.out.push_back(sz);
  }
  return s;
}

Tensor reduce(ReduceOp op, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  int64_t d = wrap_dim(dim, x.dim(), name);
  DimSplit s = split(x, d);
  if (x.is_lazy()) {
    const graph::Value v = graph::value_of(x, name);
    graph::Value r = op == ReduceOp::max ? graph::hlo::reduce_max(v, {d}) : graph::hlo::reduce_sum(v, {d});
    if (op == ReduceOp::mean) r = graph::hlo::mul(r, 1.0 / static_cast<double>(s.n));
    return graph::tensor_of(graph::hlo::reshape(r, keepdim ? s.out_keep : s.out));
  }
  check_float(name, "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(keepdim ? s.out_keep : s.out, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::reduce_dim<T>(op, xc.data<T>(), out.data<T>(), s.outer, s.n, s.inner);
  });
  return out;
}
}  // namespace

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  const OpSpan span("sum", x);
  Tensor out = reduce(ReduceOp::sum, "sum", x, dim, keepdim);
  Shape keep = split(x, wrap_dim(dim, x.dim(), "sum")).out_keep, in = x.sizes();
  autograd::record("sum", {x}, {out}, [keep, in](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0].reshape(keep).expand(in).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  const OpSpan span("mean", x);
  Tensor out = reduce(ReduceOp::mean, "mean", x, dim, keepdim);
  int64_t d = wrap_dim(dim, x.dim(), "mean");
  Shape keep = split(x, d).out_keep, in = x.sizes();
  double inv = 1.0 / static_cast<double>(x.sizes()[d]);
  autograd::record("mean", {x}, {out}, [keep, in, inv](const autograd::GradContext& g) {
    return std::vector<Tensor>{scale(g[0].reshape(keep).expand(in), inv)};
  });
  return out;
}

Tensor sum(const Tensor& x) {
  const OpSpan span("sum", x);
  Tensor out;
  if (x.is_lazy()) {
    // Accumulated in double, as sum_all accumulates.
    const graph::Value v = graph::hlo::convert(graph::value_of(x, "sum"), kF64);
    Shape all(v.shape.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    out = graph::tensor_of(graph::hlo::convert(graph::hlo::reduce_sum(v, all), x.dtype()));
  } else {
    check_float("sum", "input", x);
    Tensor xc = dense(x);
    out = Tensor::empty({}, x.options());
    kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
      using T = decltype(z);
      *out.data<T>() = static_cast<T>(kernels::cpu::sum_all<T>(xc.data<T>(), x.numel()));
    });
  }
  Shape in = x.sizes();
  autograd::record("sum", {x}, {out}, [in](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0].expand(in).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& x) {
  TITAN_CHECK(x.numel() > 0, "mean: empty tensor ", x.desc());
  return scale(sum(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  const OpSpan span("max", x);
  check_float("max", "input", x);
  int64_t d = wrap_dim(dim, x.dim(), "max");
  DimSplit s = split(x, d);
  TITAN_CHECK(s.n > 0, "max: dim ", d, " of ", x.desc(), " is empty");
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(keepdim ? s.out_keep : s.out, x.options());
  Tensor idx = Tensor::empty(s.out, {.dtype = kI64});
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::max_dim<T>(xc.data<T>(), out.data<T>(), idx.data<int64_t>(), s.outer, s.n, s.inner);
  });
  Shape in = x.sizes();
  autograd::record("max", {x}, {out}, [in, idx, s](const autograd::GradContext& g) {
    Tensor gin = Tensor::zeros(in, g[0].options());
    Tensor gc = g[0].contiguous();
    const int64_t* ip = idx.data<int64_t>();
    kernels::cpu::dispatch_float(gin.dtype(), [&](auto z) {
      using T = decltype(z);
      T* dst = gin.data<T>();
      const T* src = gc.data<T>();
      for (int64_t k = 0; k < s.outer * s.inner; ++k) {
        int64_t o = k / s.inner, j = k % s.inner;
        dst[(o * s.n + ip[k]) * s.inner + j] = src[k];
      }
    });
    return std::vector<Tensor>{gin};
  });
  return out;
}

Tensor var(const Tensor& x, int64_t dim, bool keepdim, int64_t correction) {
  const OpSpan span("var", x);
  check_float("var", "input", x);
  int64_t d = wrap_dim(dim, x.dim(), "var");
  DimSplit s = split(x, d);
  TITAN_CHECK(s.n - correction > 0, "var: dim ", d, " of ", x.desc(), " has ", s.n,
              " elements, too few for correction ", correction);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(keepdim ? s.out_keep : s.out, x.options());
  Tensor mu = Tensor::empty(s.out_keep, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::var_dim<T>(xc.data<T>(), out.data<T>(), mu.data<T>(), s.outer, s.n, s.inner, correction);
  });
  double k = 2.0 / static_cast<double>(s.n - correction);
  Tensor xd = xc.detach();
  Shape keep = s.out_keep;
  autograd::record("var", {x}, {out}, [xd, mu, keep, k](const autograd::GradContext& g) {
    // d var / d x_i = 2 (x_i - mean) / (n - correction)
    return std::vector<Tensor>{scale(mul(sub(xd, mu), g[0].reshape(keep)), k)};
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  TITAN_CHECK(x.dim() >= static_cast<int64_t>(shape.size()), "sum_to: cannot reduce ", x.desc(),
              " to ", shape_str(shape));
  Tensor r = x;
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  for (int64_t i = 0; i < lead; ++i) r = sum(r, 0, false);
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (shape[i] == 1 && r.sizes()[i] != 1) r = sum(r, i, true);
  TITAN_CHECK(r.sizes() == shape, "sum_to: cannot reduce ", x.desc(), " to ", shape_str(shape));
  return r;
}

}  // namespace titan::ops
