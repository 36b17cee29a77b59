#include "titan/ops/embedding.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/embedding.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

// The ids' values are unknown while the step is captured, so nothing checks their range here:
// XLA's gather clamps each id into [0, vocab) (a bad id reads row 0 or the last row) while its
// scatter drops an out-of-range update, so forward and backward would silently disagree. The data
// loader checks the range instead.
Tensor embedding_lowered(const Tensor& ids, const Tensor& weight) {
  const int64_t vocab = weight.size(0);
  Tensor out = graph::tensor_of(
      graph::hlo::take_rows(graph::value_of(weight, "embedding"), graph::value_of(ids, "embedding")));
  Tensor id = ids.detach();
  autograd::record("embedding", {weight}, {out}, [id, vocab](const autograd::GradContext& g) {
    return std::vector<Tensor>{graph::tensor_of(graph::hlo::scatter_add_rows(
        graph::value_of(id, "embedding"), graph::value_of(g[0], "embedding backward"), vocab))};
  });
  return out;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  const OpSpan span("embedding", ids, weight);
  const bool lazy = graph::any_lazy({&ids, &weight});
  if (!lazy) {
    check_cpu("embedding", ids);
    check_cpu("embedding", weight);
  }
  TITAN_CHECK(ids.dtype() == kI32 || ids.dtype() == kI64, "embedding: ids must be an i32 or i64 tensor, got ",
              ids.desc(), "; convert them with .to(kI64)");
  TITAN_CHECK(weight.dim() == 2 && (weight.dtype() == kF32 || weight.dtype() == kF64),
              "embedding: weight must be an f32 or f64 tensor of shape [vocab, dim], got ", weight.desc());
  if (lazy) return embedding_lowered(ids, weight);
  const int64_t vocab = weight.size(0), dim = weight.size(1), n = ids.numel();
  Tensor ic = ids.contiguous(), wc = weight.contiguous();
  kernels::cpu::check_index_range("embedding", "id", ic, vocab);
  Shape out_shape = ids.sizes();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, weight.options());
  kernels::cpu::dispatch_float_index(weight.dtype(), ids.dtype(), [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    kernels::cpu::embedding_forward<T, I>(ic.data<I>(), n, wc.data<T>(), dim, out.data<T>());
  });
  Tensor id = ic.detach();
  autograd::record("embedding", {weight}, {out}, [id, vocab, dim](const autograd::GradContext& g) {
    Tensor go = g[0].contiguous();
    Tensor dw = Tensor::empty({vocab, dim}, go.options());
    kernels::cpu::dispatch_float_index(go.dtype(), id.dtype(), [&](auto t, auto i) {
      using T = decltype(t);
      using I = decltype(i);
      kernels::cpu::embedding_backward<T, I>(id.data<I>(), id.numel(), go.data<T>(), dim, vocab,
                                             dw.data<T>());
    });
    return std::vector<Tensor>{dw};
  });
  return out;
}

}  // namespace titan::ops
