#include "titan/ops/loss.h"

#include <cmath>
#include <limits>

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
namespace hlo = graph::hlo;
using graph::Value;

// Per row of logits [rows, V] and targets [rows]: which rows count, and which class is the target.
struct Rows {
  Value counted;  // [rows] predicate: target != ignore_index
  Value target;   // [rows, V] predicate: the target's one-hot
};

// Targets are not range-checked: their values are unknown at capture. One outside [0, V) and not
// ignore_index matches no class, so its row's loss is the bare logsumexp; the data loader checks
// the range.
Rows rows_of(const Value& targets, int64_t vocab, int64_t ignore_index) {
  const int64_t rows = targets.shape[0];
  const Value classes = hlo::iota({rows, vocab}, 1, targets.dtype);
  return {
      hlo::compare(targets, hlo::constant(static_cast<double>(ignore_index), {rows}, targets.dtype), "NE"),
      hlo::compare(classes, hlo::broadcast_in_dim(targets, {rows, vocab}, {0}), "EQ")};
}

Value wide(const Value& row, int64_t vocab) {
  return hlo::broadcast_in_dim(row, {row.shape[0], vocab}, {0});
}

// As the kernel: logsumexp shifted by the row max, or by 0 where the max is -inf (a row of -inf
// then gives -inf rather than NaN).
Value logsumexp(const Value& l) {
  const int64_t rows = l.shape[0], vocab = l.shape[1];
  const Value m = hlo::reduce_max(l, {1});
  const Value ninf = hlo::constant(-INFINITY, {rows}, l.dtype);
  const Value shift = hlo::select(hlo::compare(m, ninf, "EQ"), hlo::constant(0.0, {rows}, l.dtype), m);
  return hlo::add(shift, hlo::log(hlo::reduce_sum(hlo::exp(hlo::sub(l, wide(shift, vocab))), {1})));
}

Tensor cross_entropy_lowered(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             Reduction reduction) {
  const int64_t vocab = logits.size(-1), rows = targets.numel();
  const Value l = hlo::reshape(graph::value_of(logits, "cross_entropy"), {rows, vocab});
  const Value t = hlo::reshape(graph::value_of(targets, "cross_entropy"), {rows});
  const Rows r = rows_of(t, vocab, ignore_index);
  const Value lse = logsumexp(l);
  const Value zero_rows = hlo::constant(0.0, {rows}, l.dtype);
  const Value picked = hlo::reduce_sum(hlo::select(r.target, l, hlo::constant(0.0, l.shape, l.dtype)), {1});
  const Value total = hlo::reduce_sum(hlo::select(r.counted, hlo::sub(lse, picked), zero_rows), {0});
  // As the eager op: a mean over zero counted rows is 0/0 = NaN, and the gradient stays zero
  // (every row is ignored, and ignored rows get zeros whatever the scale).
  const Value count = hlo::reduce_sum(hlo::convert(r.counted, l.dtype), {0});
  const Value scale =
      reduction == Reduction::sum ? hlo::scalar(1.0, l.dtype) : hlo::div(hlo::scalar(1.0, l.dtype), count);
  Tensor out = graph::tensor_of(hlo::mul(total, scale));

  Tensor ld = logits.detach(), td = targets.detach(), lsed = graph::tensor_of(lse),
         sd = graph::tensor_of(scale);
  auto backward = [ld, td, lsed, sd, ignore_index](const autograd::GradContext& g) {
    const int64_t vocab = ld.size(-1), rows = td.numel();
    const Value l = hlo::reshape(graph::value_of(ld, "cross_entropy"), {rows, vocab});
    const Rows r = rows_of(hlo::reshape(graph::value_of(td, "cross_entropy"), {rows}), vocab, ignore_index);
    const Value s = hlo::broadcast_to(
        hlo::mul(graph::value_of(g[0], "cross_entropy backward"), graph::value_of(sd, "cross_entropy")),
        l.shape);
    const Value zero = hlo::constant(0.0, l.shape, l.dtype);
    // (softmax - onehot) * s, as the kernel: exp(x - lse) * s, then s taken off at the target.
    const Value soft =
        hlo::mul(hlo::exp(hlo::sub(l, wide(graph::value_of(lsed, "cross_entropy"), vocab))), s);
    const Value dl = hlo::sub(soft, hlo::select(r.target, s, zero));
    const Value counted = hlo::broadcast_in_dim(r.counted, l.shape, {0});
    return std::vector<Tensor>{graph::tensor_of(hlo::reshape(hlo::select(counted, dl, zero), ld.sizes()))};
  };
  autograd::record("cross_entropy", {logits}, {out}, backward);
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  const OpSpan span("cross_entropy", logits, targets);
  const bool lazy = graph::any_lazy({&logits, &targets});
  if (!lazy) {
    check_cpu("cross_entropy", logits);
    check_cpu("cross_entropy", targets);
  }
  const int64_t vocab = check_class_logits("cross_entropy", logits, targets), rows = targets.numel();
  if (lazy) return cross_entropy_lowered(logits, targets, ignore_index, reduction);
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
