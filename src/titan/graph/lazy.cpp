#include "titan/graph/lazy.h"

namespace titan::graph {

Value value_of(const Tensor& t, const char* op) {
  TITAN_CHECK(t.defined(), op, ": got an undefined tensor");
  TITAN_CHECK(t.is_lazy(), op, ": tensor ", t.desc(), " is on ", t.device(),
              " while other operands are values of the step being captured (graph mode); move it into "
              "the step as an input (graph::host_input, or a parameter of the captured step)");
  const Program& program = current_program();
  const LazyValue& lazy = t.impl()->lazy;
  TITAN_CHECK(lazy.program == program.serial(), op, ": tensor ", t.desc(),
              " belongs to another captured program than the one being recorded; a tensor of one "
              "capture cannot be used in the next");
  return {.id = lazy.value, .shape = t.sizes(), .dtype = t.dtype(), .pred = false};
}

Tensor tensor_of(const Value& v) {
  TITAN_CHECK(!v.pred, "graph: a predicate (", mlir_type(v), ") cannot be a tensor; convert it first");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::meta(static_cast<size_t>(numel_of(v.shape)) * dtype_size(v.dtype), Device::pjrt());
  impl->lazy = {.program = current_program().serial(), .value = v.id};
  impl->sizes = v.shape;
  impl->strides = contiguous_strides(v.shape);
  impl->dtype = v.dtype;
  return Tensor(std::move(impl));
}

Value host_input(const Tensor& host, const std::string& name) {
  TITAN_CHECK(host.defined() && !host.is_lazy() && host.device().is_cpu(), "graph: host input '", name,
              "' must be a CPU tensor, got ", host.defined() ? host.desc() : std::string("undefined"));
  Program& program = current_program();
  if (const Value* v = program.host_parameter(host.impl())) return *v;
  return program.parameter(host.sizes(), host.dtype(), name, InputKind::host, host);
}

Tensor full(const Shape& shape, double value, DType dtype) {
  return tensor_of(hlo::constant(value, shape, dtype));
}

Tensor add(const Tensor& a, const Tensor& b) {
  // Rows of one index of two stacks: the stacks are added once and the sum's row names this one,
  // so that accumulating every layer's gradients does not grow the program with depth.
  const std::optional<Program::Row> ra = row_of(a), rb = row_of(b);
  if (ra && rb && ra->index == rb->index)
    if (const std::optional<Value> sum = current_program().stack_sum(ra->stacked, rb->stacked))
      return tensor_of(current_program().row(*sum, ra->index));
  return tensor_of(hlo::add(value_of(a, "add"), value_of(b, "add")));
}

void rebind(const Tensor& handle, const Value& v) {
  TITAN_CHECK(handle.defined() && handle.sizes() == v.shape && handle.dtype() == v.dtype,
              "graph: cannot rebind ", handle.defined() ? handle.desc() : std::string("undefined"), " to ",
              mlir_type(v));
  TensorImpl& impl = *handle.impl();
  if (!impl.lazy.defined()) {
    impl.storage = Storage::meta(handle.nbytes(), Device::pjrt());
    impl.strides = contiguous_strides(impl.sizes);
    impl.offset = 0;
  }
  impl.lazy = {.program = current_program().serial(), .value = v.id};
}

std::optional<Program::Row> row_of(const Tensor& t) {
  const Program* program = current_program_or_null();
  if (program == nullptr || !t.defined() || !t.is_lazy() || t.impl()->lazy.program != program->serial())
    return std::nullopt;
  return program->row_of({.id = t.impl()->lazy.value, .shape = t.sizes(), .dtype = t.dtype(), .pred = false});
}

Value stack_rows(const std::vector<Tensor>& rows, const char* op) {
  TITAN_CHECK(!rows.empty(), op, ": nothing to stack");
  // Consecutive rows of one stack are taken as that stack, or the slice of it they are: loops over
  // runs of layers (layers of several kinds) read their rows of the state, and hand back their
  // gradients, at an op a run rather than one a layer.
  std::vector<Value> pieces;
  for (size_t i = 0; i < rows.size();) {
    const std::optional<Program::Row> first = row_of(rows[i]);
    size_t end = i + 1;
    while (first && end < rows.size()) {
      const std::optional<Program::Row> r = row_of(rows[end]);
      if (!r || r->stacked.id != first->stacked.id ||
          r->index != first->index + static_cast<int64_t>(end - i))
        break;
      ++end;
    }
    if (first) {
      const Value& stacked = first->stacked;
      const auto count = static_cast<int64_t>(end - i);
      pieces.push_back(first->index == 0 && count == stacked.shape[0]
                           ? stacked
                           : hlo::narrow(stacked, 0, first->index, count));
    } else {
      const Value v = value_of(rows[i], op);
      Shape one = v.shape;
      one.insert(one.begin(), 1);
      pieces.push_back(hlo::reshape(v, one));
    }
    i = end;
  }
  return pieces.size() == 1 ? pieces[0] : hlo::concatenate(pieces, 0);
}

void BoundTensors::bind(const Tensor& t, const Value& v) {
  TITAN_CHECK(!t.is_lazy(), "graph: ", t.desc(), " is bound to the program already");
  TensorImpl& impl = *t.impl();
  saved_.push_back({.handle = t, .storage = impl.storage, .strides = impl.strides, .offset = impl.offset});
  rebind(t, v);
}

BoundTensors::~BoundTensors() {
  for (Saved& s : saved_) {
    TensorImpl& impl = *s.handle.impl();
    impl.storage = std::move(s.storage);
    impl.strides = std::move(s.strides);
    impl.offset = s.offset;
    impl.lazy = {};
    if (impl.autograd && impl.autograd->grad.defined() && impl.autograd->grad.is_lazy()) impl.autograd->grad = Tensor();
  }
}

}  // namespace titan::graph
