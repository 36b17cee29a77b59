#include "titan/ops/embedding.h"

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/embedding.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  const OpSpan span("embedding", ids, weight);
  check_cpu("embedding", ids);
  check_cpu("embedding", weight);
  TITAN_CHECK(ids.dtype() == kI32 || ids.dtype() == kI64, "embedding: ids must be an i32 or i64 tensor, got ",
              ids.desc(), "; convert them with .to(kI64)");
  TITAN_CHECK(weight.dim() == 2 && (weight.dtype() == kF32 || weight.dtype() == kF64),
              "embedding: weight must be an f32 or f64 tensor of shape [vocab, dim], got ", weight.desc());
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
