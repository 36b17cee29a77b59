#include "titan/ops/activation.h"

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/activation.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
using kernels::cpu::Activation;


Tensor pointwise(const char* op, Activation act, const Tensor& x) {
  const OpSpan span(op, x);
  check_float(op, "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::activation_fwd<T>(act, xc.data<T>(), out.data<T>(), x.numel());
  });
  autograd::record(op, {x}, {out}, [act, xc](const autograd::GradContext& g) {
    Tensor gc = g[0].contiguous();
    Tensor dx = Tensor::empty(xc.sizes(), xc.options());
    kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::activation_bwd<T>(act, xc.data<T>(), gc.data<T>(), dx.data<T>(), dx.numel());
    });
    return std::vector<Tensor>{dx};
  });
  return out;
}
}  // namespace

Tensor sigmoid(const Tensor& x) { return pointwise("sigmoid", Activation::sigmoid, x); }

Tensor silu(const Tensor& x) { return pointwise("silu", Activation::silu, x); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? pointwise("gelu(tanh)", Activation::gelu_tanh, x)
                                                : pointwise("gelu", Activation::gelu, x);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  const OpSpan span("swiglu", gate, up);
  check_float("swiglu", "gate", gate);
  check_float("swiglu", "up", up);
  TITAN_CHECK(gate.dtype() == up.dtype(), "swiglu: gate ", gate.desc(), " and up ", up.desc(),
              " differ in dtype; cast one with .to()");
  TITAN_CHECK(gate.sizes() == up.sizes(), "swiglu: gate ", gate.desc(), " and up ", up.desc(),
              " must have the same shape (no broadcasting in the fused kernel)");
  Tensor gc = dense(gate), uc = dense(up);
  Tensor out = Tensor::empty(gate.sizes(), gate.options());
  kernels::cpu::dispatch_float(gate.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::swiglu_fwd<T>(gc.data<T>(), uc.data<T>(), out.data<T>(), out.numel());
  });
  autograd::record("swiglu", {gate, up}, {out}, [gc, uc](const autograd::GradContext& g) {
    Tensor dc = g[0].contiguous();
    Tensor d_gate = Tensor::empty(gc.sizes(), gc.options()), d_up = Tensor::empty(uc.sizes(), uc.options());
    kernels::cpu::dispatch_float(gc.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::swiglu_bwd<T>(gc.data<T>(), uc.data<T>(), dc.data<T>(), d_gate.data<T>(), d_up.data<T>(),
                                  d_gate.numel());
    });
    return std::vector<Tensor>{g.needs(0) ? d_gate : Tensor(), g.needs(1) ? d_up : Tensor()};
  });
  return out;
}

}  // namespace titan::ops
