#include "titan/ops/activation.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/activation.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/ops/arith.h"
#include "titan/ops/checks.h"
#include "titan/ops/custom_calls.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {
using kernels::cpu::Activation;
namespace hlo = graph::hlo;
using graph::Value;

constexpr double kSqrtHalf = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluTanhCubic = 0.044715;
constexpr double kQuickGelu = 1.702;

// sigmoid(x) and its complement sigmoid(-x) = 1 - sigmoid(x), each computed directly as the kernels
// do: the difference 1 - s rounds to 0 in f32 once s rounds to 1, while the gradient s * c is not 0.
struct Sigmoid {
  Value s, c;
};
Sigmoid sigmoid_pair(const Value& x) {
  return {hlo::logistic(x), hlo::logistic(hlo::neg(x))};
}

// Phi(x) = erfc(-x / sqrt 2) / 2: erfc keeps its relative accuracy for negative x, where
// 1 + erf(x / sqrt 2) would cancel.
Value normal_cdf(const Value& x) {
  return hlo::mul(hlo::erfc(hlo::mul(x, -kSqrtHalf)), 0.5);
}

// 2u for gelu(tanh): 0.5 (1 + tanh(u)) is sigmoid(2u).
Value gelu_tanh_u2(const Value& x) {
  return hlo::mul(hlo::add(x, hlo::mul(hlo::mul(hlo::mul(x, x), x), kGeluTanhCubic)), 2 * kSqrt2OverPi);
}

Value activation_fwd(Activation act, const Value& x) {
  switch (act) {
    case Activation::sigmoid: return hlo::logistic(x);
    case Activation::silu: return hlo::mul(x, hlo::logistic(x));
    case Activation::gelu: return hlo::mul(x, normal_cdf(x));
    case Activation::gelu_tanh: return hlo::mul(x, hlo::logistic(gelu_tanh_u2(x)));
    case Activation::tanh: return hlo::tanh(x);
    case Activation::quick_gelu: return hlo::mul(x, hlo::logistic(hlo::mul(x, kQuickGelu)));
  }
  throw Error("graph: unknown activation");
}

// dy * act'(x), the kernels' formulas.
Value activation_bwd(Activation act, const Value& x, const Value& dy) {
  switch (act) {
    case Activation::sigmoid: {
      const auto [s, c] = sigmoid_pair(x);
      return hlo::mul(dy, hlo::mul(s, c));
    }
    case Activation::silu: {
      const auto [s, c] = sigmoid_pair(x);
      return hlo::mul(dy, hlo::mul(s, hlo::add(hlo::mul(x, c), 1.0)));
    }
    case Activation::gelu: {
      const Value pdf = hlo::mul(hlo::exp(hlo::mul(hlo::mul(x, x), -0.5)), kInvSqrt2Pi);
      return hlo::mul(dy, hlo::add(normal_cdf(x), hlo::mul(x, pdf)));
    }
    case Activation::gelu_tanh: {
      const auto [s, c] = sigmoid_pair(gelu_tanh_u2(x));
      // d(2u)/dx = 2 sqrt(2/pi) (1 + 3 k x^2), k the cubic coefficient
      const Value du2 =
          hlo::mul(hlo::add(hlo::mul(hlo::mul(x, x), 3 * kGeluTanhCubic), 1.0), 2 * kSqrt2OverPi);
      return hlo::mul(dy, hlo::mul(s, hlo::add(hlo::mul(hlo::mul(x, c), du2), 1.0)));
    }
    case Activation::tanh: {
      const auto [s, c] = sigmoid_pair(hlo::mul(x, 2.0));
      return hlo::mul(dy, hlo::mul(hlo::mul(s, c), 4.0));
    }
    case Activation::quick_gelu: {
      const auto [s, c] = sigmoid_pair(hlo::mul(x, kQuickGelu));
      return hlo::mul(dy, hlo::mul(s, hlo::add(hlo::mul(hlo::mul(x, c), kQuickGelu), 1.0)));
    }
  }
  throw Error("graph: unknown activation");
}

void check_lazy_float(const char* op, const char* arg, const Tensor& t) {
  TITAN_CHECK(t.dtype() == kF32 || t.dtype() == kF64, op, ": ", arg, " must be f32 or f64, got ", t.desc());
}

Tensor pointwise_lowered(const char* op, Activation act, const Tensor& x) {
  check_lazy_float(op, "input", x);
  Tensor out = graph::tensor_of(activation_fwd(act, graph::value_of(x, op)));
  Tensor xd = x.detach();
  autograd::record(op, {x}, {out}, [op, act, xd](const autograd::GradContext& g) {
    return std::vector<Tensor>{
        graph::tensor_of(activation_bwd(act, graph::value_of(xd, op), graph::value_of(g[0], op)))};
  });
  return out;
}

// As eager's kernels (custom calls) where the program runs titan's kernels: the M step of
// bench_train_step in f32 took 1.72-1.75 s a step with them, 1.82-1.92 s with XLA's fusions
// (Intel Xeon, 2 cores).
Tensor swiglu_called(const Tensor& gate, const Tensor& up) {
  const Tensor out =
      graph::tensor_of(swiglu_fwd_call(graph::value_of(gate, "swiglu"), graph::value_of(up, "swiglu")));
  autograd::record("swiglu", {gate, up}, {out}, [gd = gate.detach(), ud = up.detach()](const autograd::GradContext& g) {
    const std::vector<Value> d = swiglu_bwd_call(graph::value_of(gd, "swiglu"), graph::value_of(ud, "swiglu"),
                                                 graph::value_of(g[0], "swiglu backward"));
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(d[0]) : Tensor(), g.needs(1) ? graph::tensor_of(d[1]) : Tensor()};
  });
  return out;
}

Tensor swiglu_lowered(const Tensor& gate, const Tensor& up) {
  if (graph::current_program().custom_kernels()) return swiglu_called(gate, up);
  const Value gv = graph::value_of(gate, "swiglu"), uv = graph::value_of(up, "swiglu");
  Tensor out = graph::tensor_of(hlo::mul(hlo::mul(gv, hlo::logistic(gv)), uv));
  Tensor gd = gate.detach(), ud = up.detach();
  autograd::record("swiglu", {gate, up}, {out}, [gd, ud](const autograd::GradContext& g) {
    const Value gv = graph::value_of(gd, "swiglu"), uv = graph::value_of(ud, "swiglu");
    const Value d = graph::value_of(g[0], "swiglu backward");
    const auto [s, c] = sigmoid_pair(gv);
    const Value d_up = hlo::mul(d, hlo::mul(gv, s));
    const Value d_gate = hlo::mul(hlo::mul(d, uv), hlo::mul(s, hlo::add(hlo::mul(gv, c), 1.0)));
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(d_gate) : Tensor(),
                               g.needs(1) ? graph::tensor_of(d_up) : Tensor()};
  });
  return out;
}

Tensor pointwise(const char* op, Activation act, const Tensor& x) {
  const OpSpan span(op, x);
  if (x.is_lazy()) return pointwise_lowered(op, act, x);
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

Tensor tanh(const Tensor& x) { return pointwise("tanh", Activation::tanh, x); }

Tensor quick_gelu(const Tensor& x) { return pointwise("quick_gelu", Activation::quick_gelu, x); }

Tensor softcap(const Tensor& x, double cap) {
  TITAN_CHECK(cap > 0, "softcap: the cap must be positive, got ", cap);
  if (x.is_lazy()) return tanh(scale(x, 1.0 / cap)) * cap;
  const OpSpan span("softcap", x);
  check_float("softcap", "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::softcap_fwd<T>(xc.data<T>(), out.data<T>(), x.numel(), static_cast<T>(cap));
  });
  autograd::record("softcap", {x}, {out}, [xc, cap](const autograd::GradContext& g) {
    Tensor gc = g[0].contiguous();
    Tensor dx = Tensor::empty(xc.sizes(), xc.options());
    kernels::cpu::dispatch_float(xc.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::softcap_bwd<T>(xc.data<T>(), gc.data<T>(), dx.data<T>(), dx.numel(), static_cast<T>(cap));
    });
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? pointwise("gelu(tanh)", Activation::gelu_tanh, x)
                                                : pointwise("gelu", Activation::gelu, x);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  const OpSpan span("swiglu", gate, up);
  const bool lazy = graph::any_lazy({&gate, &up});
  if (lazy) {
    check_lazy_float("swiglu", "gate", gate);
    check_lazy_float("swiglu", "up", up);
  } else {
    check_float("swiglu", "gate", gate);
    check_float("swiglu", "up", up);
  }
  TITAN_CHECK(gate.dtype() == up.dtype(), "swiglu: gate ", gate.desc(), " and up ", up.desc(),
              " differ in dtype; cast one with .to()");
  TITAN_CHECK(gate.sizes() == up.sizes(), "swiglu: gate ", gate.desc(), " and up ", up.desc(),
              " must have the same shape (no broadcasting in the fused kernel)");
  if (lazy) return swiglu_lowered(gate, up);
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
