// Copies and casts (Tensor methods declared in core/tensor.h).
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/elementwise.h"
#include "titan/ops/op_span.h"

namespace titan {

namespace {
void check_writable(const char* op, const Tensor& t) {
  check_cpu(op, t);
  TITAN_CHECK(!(autograd::grad_enabled() && t.requires_grad()), op, ": tensor ", t.desc(),
              " requires grad; modify it in place only under autograd::NoGradGuard");
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  const ops::OpSpan span("clone", *this);
  Tensor out;
  if (is_lazy()) {
    out = graph::tensor_of(graph::value_of(*this, "clone"));  // values are immutable: a new name suffices
  } else {
    check_cpu("clone", *this);
    out = Tensor::empty(sizes(), options());
    kernels::cpu::copy(*this, out);
  }
  autograd::record("clone", {*this}, {out}, [](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0]};
  });
  return out;
}

Tensor Tensor::to(DType t) const {
  const ops::OpSpan span("to", *this);
  if (t == dtype()) return *this;
  Tensor out;
  if (is_lazy()) {
    out = graph::tensor_of(graph::hlo::convert(graph::value_of(*this, "to"), t));
  } else {
    check_cpu("to", *this);
    out = Tensor::empty(sizes(), {.dtype = t, .device = device()});
    kernels::cpu::copy(*this, out);
  }
  if (is_floating(t)) {
    DType from = dtype();
    autograd::record("to", {*this}, {out}, [from](const autograd::GradContext& g) {
      return std::vector<Tensor>{g[0].to(from)};
    });
  }
  return out;
}

Tensor& Tensor::fill_(double value) {
  if (is_lazy()) {
    graph::rebind(*this, graph::hlo::constant(value, sizes(), dtype()));
    return *this;
  }
  check_writable("fill_", *this);
  Tensor v = Tensor::full({}, value, options());
  kernels::cpu::copy(v, *this);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  const ops::OpSpan span("copy_", *this, src);
  if (is_lazy() || src.is_lazy()) {
    // In a captured step an in-place write is a new value under the old name.
    TITAN_CHECK(is_lazy(), "copy_: destination ", desc(), " is on ", device(), " but the source ", src.desc(),
                " is a value of the step being captured; copy it out after the step runs");
    const graph::Value v = graph::hlo::convert(graph::value_of(src, "copy_"), dtype());
    graph::rebind(*this, graph::hlo::broadcast_to(v, sizes()));
    return *this;
  }
  check_writable("copy_", *this);
  check_cpu("copy_", src);
  broadcast_shapes(src.sizes(), sizes(), "copy_");
  TITAN_CHECK(numel_of(broadcast_shapes(src.sizes(), sizes(), "copy_")) == numel(), "copy_: source ",
              src.desc(), " does not broadcast to destination ", desc());
  kernels::cpu::copy(src, *this);
  return *this;
}

double Tensor::item() const {
  TITAN_CHECK(numel() == 1, "item: tensor ", desc(), " has ", numel(), " elements, expected 1");
  const MetaScope real(false);  // a scratch copy that holds values, whatever scope we are in
  Tensor d = Tensor::empty(sizes(), {.dtype = kF64});
  kernels::cpu::copy(*this, d);
  return *d.data<double>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_cpu("to_vector", *this);
  const MetaScope real(false);
  Tensor c = Tensor::empty(sizes(), {.dtype = dtype_of<T>::value});
  kernels::cpu::copy(*this, c);
  const T* p = c.data<T>();
  return std::vector<T>(p, p + numel());
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

}  // namespace titan
