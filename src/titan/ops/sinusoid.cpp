#include "titan/ops/sinusoid.h"

#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/sinusoid.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
namespace hlo = graph::hlo;
using graph::Value;

Tensor sinusoid_lowered(const Tensor& t, const Tensor& freqs) {
  const int64_t batch = t.size(0), half = freqs.size(0);
  const Shape grid{batch, half};
  const Value tv = hlo::broadcast_in_dim(graph::value_of(t, "sinusoid"), grid, {0});
  const Value fv = hlo::broadcast_in_dim(graph::host_input(freqs, "sinusoid_freqs"), grid, {1});
  const Value arg = hlo::mul(tv, fv);
  return graph::tensor_of(hlo::concatenate({hlo::cos(arg), hlo::sin(arg)}, 1));
}

}  // namespace

Tensor sinusoid(const Tensor& t, const Tensor& freqs) {
  const OpSpan span("sinusoid", t);
  TITAN_CHECK(t.defined() && t.dim() == 1 && (t.dtype() == kF32 || t.dtype() == kF64),
              "sinusoid: t must be f32 or f64 [B], got ", t.defined() ? t.desc() : std::string("undefined"));
  TITAN_CHECK(!t.requires_grad(), "sinusoid: t ", t.desc(),
              " requires grad, but the embedding is a constant of t; detach it");
  TITAN_CHECK(freqs.defined() && freqs.dim() == 1 && freqs.dtype() == t.dtype(),
              "sinusoid: freqs must be [half] in t's dtype (", dtype_name(t.dtype()), "), got ",
              freqs.defined() ? freqs.desc() : std::string("undefined"));
  check_cpu("sinusoid", freqs);
  if (t.is_lazy()) return sinusoid_lowered(t, freqs.contiguous());
  check_cpu("sinusoid", t);
  const Tensor tc = dense(t), fc = dense(freqs);
  Tensor out = Tensor::empty({t.size(0), 2 * freqs.size(0)}, t.options());
  kernels::cpu::dispatch_float(t.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::sinusoid<T>(tc.data<T>(), t.size(0), fc.data<T>(), fc.size(0), out.data<T>());
  });
  return out;
}

}  // namespace titan::ops
