#include "titan/ops/softmax.h"

#include <algorithm>

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
using kernels::cpu::SoftmaxKind;

// The kernels run along the last, contiguous dim. Another dim is moved there and back with a
// transposed copy each way: softmax over a non-last dim is rare enough not to need its own
// strided kernel. Detached, so the copies record no autograd nodes of their own.
struct LastDim {
  int64_t dim;
  bool is_last;
  Tensor to_rows(const Tensor& t) const {
    return is_last ? t.detach().contiguous() : t.detach().transpose(dim, -1).contiguous();
  }
  Tensor from_rows(const Tensor& t) const { return is_last ? t : t.transpose(dim, -1).contiguous(); }
};

namespace hlo = graph::hlo;
using graph::Value;

Value wide_max(const Value& x, int64_t d) {
  return hlo::broadcast_to(hlo::max_keep(x, d), x.shape);
}
Value wide_sum(const Value& x, int64_t d) {
  return hlo::broadcast_to(hlo::sum_keep(x, d), x.shape);
}

// The kernels' forward along dim d of x (at least 1-d): the max subtracted first, so -inf entries
// give exact zeros and a row of -inf gives NaN, as the kernels.
Value softmax_fwd(SoftmaxKind kind, const Value& x, int64_t d) {
  const Value shifted = hlo::sub(x, wide_max(x, d));
  const Value e = hlo::exp(shifted);
  if (kind == SoftmaxKind::softmax) return hlo::div(e, wide_sum(e, d));
  return hlo::sub(shifted, hlo::log(wide_sum(e, d)));
}

// From the forward output y, as the kernels: softmax y * (dy - sum(dy * y)), log_softmax
// dy - exp(y) * sum(dy).
Value softmax_bwd(SoftmaxKind kind, const Value& y, const Value& dy, int64_t d) {
  if (kind == SoftmaxKind::softmax) return hlo::mul(y, hlo::sub(dy, wide_sum(hlo::mul(dy, y), d)));
  return hlo::sub(dy, hlo::mul(hlo::exp(y), wide_sum(dy, d)));
}

// A 0-d value as the one row of one element the eager op takes it for.
Value at_least_1d(const Value& v) {
  return v.shape.empty() ? hlo::reshape(v, {1}) : v;
}

Tensor softmax_lowered(const char* op, SoftmaxKind kind, const Tensor& x, int64_t d) {
  const Value xv = graph::value_of(x, op);
  Tensor out = graph::tensor_of(hlo::reshape(softmax_fwd(kind, at_least_1d(xv), d), xv.shape));
  Tensor od = out.detach();
  autograd::record(op, {x}, {out}, [op, kind, od, d](const autograd::GradContext& g) {
    const Value y = graph::value_of(od, op), dy = graph::value_of(g[0], op);
    return std::vector<Tensor>{
        graph::tensor_of(hlo::reshape(softmax_bwd(kind, at_least_1d(y), at_least_1d(dy), d), y.shape))};
  });
  return out;
}

Tensor softmax_like(const char* op, SoftmaxKind kind, const Tensor& x, int64_t dim) {
  const OpSpan span(op, x);
  if (!x.is_lazy()) check_cpu(op, x);
  TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, op, ": input must be f32 or f64, got ", x.desc());
  // A 0-d tensor is one row of one element (dims 0 and -1 both name it, as in PyTorch).
  const int64_t ndim = std::max<int64_t>(x.dim(), 1);
  const int64_t d = wrap_dim(dim, ndim, op);
  if (x.is_lazy()) return softmax_lowered(op, kind, x, d);
  const LastDim ld{d, d == ndim - 1};
  const int64_t n = x.dim() == 0 ? 1 : x.size(ld.dim);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;

  Tensor xr = ld.to_rows(x);
  Tensor yr = Tensor::empty(xr.sizes(), x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::softmax_fwd<T>(kind, xr.data<T>(), yr.data<T>(), rows, n);
  });
  Tensor out = ld.from_rows(yr);

  // Saves the output only (both backwards need just y), re-laid-out in backward if need be, so a
  // non-last dim costs no extra memory between forward and backward.
  Tensor od = out.detach();
  autograd::record(op, {x}, {out}, [kind, ld, od, rows, n](const autograd::GradContext& g) {
    Tensor y = ld.to_rows(od), gr = ld.to_rows(g[0]);
    Tensor dx = Tensor::empty(y.sizes(), y.options());
    kernels::cpu::dispatch_float(y.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::softmax_bwd<T>(kind, y.data<T>(), gr.data<T>(), dx.data<T>(), rows, n);
    });
    return std::vector<Tensor>{ld.from_rows(dx)};
  });
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_like("softmax", SoftmaxKind::softmax, x, dim); }

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_like("log_softmax", SoftmaxKind::log_softmax, x, dim);
}

}  // namespace titan::ops
