#include "titan/ops/arith.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/elementwise.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"
#include "titan/ops/reduce.h"

namespace titan::ops {

namespace {
using kernels::cpu::BinaryOp;
using kernels::cpu::UnaryOp;

// The lowering of binary() and unary(): operands broadcast as the kernels broadcast them.
graph::Value lowered_binary(BinaryOp k, const graph::Value& a, const graph::Value& b) {
  switch (k) {
    case BinaryOp::add: return graph::hlo::add(a, b);
    case BinaryOp::sub: return graph::hlo::sub(a, b);
    case BinaryOp::mul: return graph::hlo::mul(a, b);
    case BinaryOp::div: return graph::hlo::div(a, b);
  }
  throw Error("graph: unknown binary op");
}

graph::Value lowered_unary(UnaryOp k, const graph::Value& x) {
  switch (k) {
    case UnaryOp::neg: return graph::hlo::neg(x);
    case UnaryOp::exp: return graph::hlo::exp(x);
    case UnaryOp::log: return graph::hlo::log(x);
    case UnaryOp::sqrt: return graph::hlo::sqrt(x);
    case UnaryOp::rsqrt: return graph::hlo::rsqrt(x);
    case UnaryOp::abs: return graph::hlo::abs(x);
    case UnaryOp::square: return graph::hlo::mul(x, x);
  }
  throw Error("graph: unknown unary op");
}

Tensor binary(const char* op, BinaryOp k, const Tensor& a, const Tensor& b) {
  if (graph::any_lazy({&a, &b})) {
    TITAN_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": dtypes differ or are not floating: ",
                a.desc(), " and ", b.desc(), "; cast one with .to()");
    const Shape out = broadcast_shapes(a.sizes(), b.sizes(), op);
    return graph::tensor_of(lowered_binary(k, graph::hlo::broadcast_to(graph::value_of(a, op), out),
                                           graph::hlo::broadcast_to(graph::value_of(b, op), out)));
  }
  check_float(op, "a", a);
  check_float(op, "b", b);
  TITAN_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.desc(), " and ", b.desc(),
              "; cast one with .to()");
  Tensor out = Tensor::empty(broadcast_shapes(a.sizes(), b.sizes(), op), a.options());
  kernels::cpu::binary(k, a, b, out);
  return out;
}

Tensor unary(const char* op, UnaryOp k, const Tensor& x) {
  if (x.is_lazy()) return graph::tensor_of(lowered_unary(k, graph::value_of(x, op)));
  check_float(op, "input", x);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  kernels::cpu::unary(k, x, out);
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const OpSpan span("add", a, b);
  Tensor out = binary("add", BinaryOp::add, a, b);
  Shape sa = a.sizes(), sb = b.sizes();
  autograd::record("add", {a, b}, {out}, [sa, sb](const autograd::GradContext& g) {
    return std::vector<Tensor>{g.needs(0) ? sum_to(g[0], sa) : Tensor(),
                               g.needs(1) ? sum_to(g[0], sb) : Tensor()};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  const OpSpan span("sub", a, b);
  Tensor out = binary("sub", BinaryOp::sub, a, b);
  Shape sa = a.sizes(), sb = b.sizes();
  autograd::record("sub", {a, b}, {out}, [sa, sb](const autograd::GradContext& g) {
    return std::vector<Tensor>{g.needs(0) ? sum_to(g[0], sa) : Tensor(),
                               g.needs(1) ? sum_to(neg(g[0]), sb) : Tensor()};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const OpSpan span("mul", a, b);
  Tensor out = binary("mul", BinaryOp::mul, a, b);
  Tensor ad = a.detach(), bd = b.detach();
  autograd::record("mul", {a, b}, {out}, [ad, bd](const autograd::GradContext& g) {
    return std::vector<Tensor>{g.needs(0) ? sum_to(mul(g[0], bd), ad.sizes()) : Tensor(),
                               g.needs(1) ? sum_to(mul(g[0], ad), bd.sizes()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  const OpSpan span("div", a, b);
  Tensor out = binary("div", BinaryOp::div, a, b);
  Tensor bd = b.detach(), od = out.detach();
  Shape sa = a.sizes();
  autograd::record("div", {a, b}, {out}, [bd, od, sa](const autograd::GradContext& g) {
    Tensor ga = div(g[0], bd);
    return std::vector<Tensor>{g.needs(0) ? sum_to(ga, sa) : Tensor(),
                               g.needs(1) ? sum_to(neg(mul(ga, od)), bd.sizes()) : Tensor()};
  });
  return out;
}

Tensor neg(const Tensor& x) {
  const OpSpan span("neg", x);
  Tensor out = unary("neg", UnaryOp::neg, x);
  autograd::record("neg", {x}, {out}, [](const autograd::GradContext& g) {
    return std::vector<Tensor>{neg(g[0])};
  });
  return out;
}

Tensor scale(const Tensor& x, double s) {
  const OpSpan span("scale", x);
  Tensor out;
  if (x.is_lazy()) {
    out = graph::tensor_of(graph::hlo::mul(graph::value_of(x, "scale"), s));
  } else {
    check_float("scale", "input", x);
    out = Tensor::empty(x.sizes(), x.options());
    kernels::cpu::affine(x, s, 0.0, out);
  }
  autograd::record("scale", {x}, {out}, [s](const autograd::GradContext& g) {
    return std::vector<Tensor>{scale(g[0], s)};
  });
  return out;
}

Tensor add_scalar(const Tensor& x, double c) {
  const OpSpan span("add_scalar", x);
  Tensor out;
  if (x.is_lazy()) {
    out = graph::tensor_of(graph::hlo::add(graph::value_of(x, "add_scalar"), c));
  } else {
    check_float("add_scalar", "input", x);
    out = Tensor::empty(x.sizes(), x.options());
    kernels::cpu::affine(x, 1.0, c, out);
  }
  autograd::record("add_scalar", {x}, {out}, [](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0]};
  });
  return out;
}

Tensor exp(const Tensor& x) {
  const OpSpan span("exp", x);
  Tensor out = unary("exp", UnaryOp::exp, x);
  Tensor od = out.detach();
  autograd::record("exp", {x}, {out}, [od](const autograd::GradContext& g) {
    return std::vector<Tensor>{mul(g[0], od)};
  });
  return out;
}

Tensor log(const Tensor& x) {
  const OpSpan span("log", x);
  Tensor out = unary("log", UnaryOp::log, x);
  Tensor xd = x.detach();
  autograd::record("log", {x}, {out}, [xd](const autograd::GradContext& g) {
    return std::vector<Tensor>{div(g[0], xd)};
  });
  return out;
}

Tensor sqrt(const Tensor& x) {
  const OpSpan span("sqrt", x);
  Tensor out = unary("sqrt", UnaryOp::sqrt, x);
  Tensor od = out.detach();
  autograd::record("sqrt", {x}, {out}, [od](const autograd::GradContext& g) {
    return std::vector<Tensor>{scale(div(g[0], od), 0.5)};
  });
  return out;
}

Tensor square(const Tensor& x) {
  const OpSpan span("square", x);
  Tensor out = unary("square", UnaryOp::square, x);
  Tensor xd = x.detach();
  autograd::record("square", {x}, {out}, [xd](const autograd::GradContext& g) {
    return std::vector<Tensor>{scale(mul(g[0], xd), 2.0)};
  });
  return out;
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  const OpSpan span("clamp", x);
  TITAN_CHECK(lo <= hi, "clamp: expected lo <= hi, got lo=", lo, " hi=", hi);
  Tensor out;
  if (x.is_lazy()) {
    const graph::Value xv = graph::value_of(x, "clamp");
    const graph::Value l = graph::hlo::constant(lo, x.sizes(), x.dtype());
    const graph::Value h = graph::hlo::constant(hi, x.sizes(), x.dtype());
    out = graph::tensor_of(graph::hlo::min(graph::hlo::max(xv, l), h));
  } else {
    check_float("clamp", "input", x);
    out = Tensor::empty(x.sizes(), x.options());
    kernels::cpu::clamp(x, lo, hi, out);
  }
  Tensor xd = x.detach();
  autograd::record("clamp", {x}, {out}, [xd, lo, hi](const autograd::GradContext& g) {
    if (xd.is_lazy()) {
      namespace hlo = graph::hlo;
      const graph::Value xv = graph::value_of(xd, "clamp backward");
      const graph::Value inside =
          hlo::logical_and(hlo::compare(xv, hlo::constant(lo, xd.sizes(), xd.dtype()), "GE"),
                           hlo::compare(xv, hlo::constant(hi, xd.sizes(), xd.dtype()), "LE"));
      const graph::Value dy = graph::value_of(g[0], "clamp backward");
      return std::vector<Tensor>{
          graph::tensor_of(hlo::select(inside, dy, hlo::constant(0.0, xd.sizes(), xd.dtype())))};
    }
    Tensor dy = g[0].contiguous(), dx = Tensor::empty(xd.sizes(), xd.options());
    kernels::cpu::clamp_backward(xd, dy, lo, hi, dx);
    return std::vector<Tensor>{dx};
  });
  return out;
}

}  // namespace titan::ops
