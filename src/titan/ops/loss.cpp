#include "titan/ops/loss.h"

#include <limits>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  const OpSpan span("cross_entropy", logits, targets);
  check_cpu("cross_entropy", logits);
  check_cpu("cross_entropy", targets);
  TITAN_CHECK(logits.dtype() == kF32 || logits.dtype() == kF64,
              "cross_entropy: logits must be an f32 or f64 tensor, got ", logits.desc());
  TITAN_CHECK(targets.dtype() == kI32 || targets.dtype() == kI64,
              "cross_entropy: targets must be class indices (i32 or i64), got ", targets.desc());
  TITAN_CHECK(logits.dim() >= 1, "cross_entropy: logits must have a class dim (the last), got ",
              logits.desc());
  const Shape row_shape(logits.sizes().begin(), logits.sizes().end() - 1);
  TITAN_CHECK(targets.sizes() == row_shape, "cross_entropy: logits ", logits.desc(),
              " need targets of shape ", shape_str(row_shape),
              " (the logits' shape without the class dim), got ", targets.desc());
  const int64_t vocab = logits.size(-1), rows = targets.numel();
  TITAN_CHECK(vocab > 0, "cross_entropy: logits ", logits.desc(), " have no classes");
  Tensor lc = logits.contiguous(), tc = targets.contiguous();
  kernels::cpu::check_index_range("cross_entropy", "target", tc, vocab, ignore_index);

  Tensor lse = Tensor::empty({rows}, logits.options());
  kernels::cpu::CrossEntropySums sums;
  kernels::cpu::dispatch_float_index(logits.dtype(), targets.dtype(), [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    sums = kernels::cpu::cross_entropy_forward<T, I>(lc.data<T>(), tc.data<I>(), rows, vocab, ignore_index,
                                                     lse.data<T>());
  });
  // As PyTorch: a mean over zero counted rows is 0/0 = NaN, while the gradient stays zero (every
  // row is ignored, and ignored rows get zeros whatever the scale).
  const double scale = reduction == Reduction::sum ? 1.0
                       : sums.count > 0            ? 1.0 / static_cast<double>(sums.count)
                                                   : std::numeric_limits<double>::quiet_NaN();
  Tensor out = Tensor::full({}, sums.loss * scale, logits.options());

  Tensor ld = lc.detach(), td = tc.detach();
  auto backward = [ld, td, lse, ignore_index, scale](const autograd::GradContext& g) {
    Tensor dl = Tensor::empty(ld.sizes(), ld.options());
    const double s = g[0].item() * scale;
    kernels::cpu::dispatch_float_index(ld.dtype(), td.dtype(), [&](auto t, auto i) {
      using T = decltype(t);
      using I = decltype(i);
      kernels::cpu::cross_entropy_backward<T, I>(ld.data<T>(), td.data<I>(), lse.data<T>(), td.numel(),
                                                 ld.size(-1), ignore_index, static_cast<T>(s), dl.data<T>());
    });
    return std::vector<Tensor>{dl};
  };
  autograd::record("cross_entropy", {logits}, {out}, backward);
  return out;
}

}  // namespace titan::ops
