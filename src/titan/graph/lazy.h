#pragma once
// Tensors on a PJRT device during a capture: each names a value of the current program
// (graph/ir/program.h) and has no memory. An op with a lowering checks `any_lazy` on its inputs
// and, when one is, records its StableHLO (and an autograd node whose backward records the
// backward's) instead of running its kernel; an op without one refuses them (core's check_cpu).
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/graph/ir/hlo.h"

namespace titan::graph {

inline bool any_lazy(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->is_lazy()) return true;
  return false;
}

// The value a lazy tensor names. A host tensor meeting lazy ones in `op` is refused: its data
// would be baked into the program as it is now (a bug once it changes) — declare it an input.
Value value_of(const Tensor& t, const char* op);
// A tensor on the PJRT device naming `v` of the current program.
Tensor tensor_of(const Value& v);
// A host tensor that stays fixed across runs (a RoPE table) as an input of the current program:
// one parameter however often it is asked for.
Value host_input(const Tensor& host, const std::string& name);
// A constant of the current program, as a tensor on the PJRT device.
Tensor full(const Shape& shape, double value, DType dtype);
// The sum of two tensors of one shape and dtype, recorded (gradient accumulation).
Tensor add(const Tensor& a, const Tensor& b);
// Makes `handle` (and every copy of it) name `v`: what an in-place update is in a program.
void rebind(const Tensor& handle, const Value& v);
// The stacked value `t` is a row of (Program::row), if it names one of the current program.
std::optional<Program::Row> row_of(const Tensor& t);
// `rows` stacked [n, ...]: the stacked value they already are rows 0..n-1 of, in order (graph
// mode's stacked training state), or else their concatenation, in which each run of consecutive
// rows of one stack is that stack's slice. `op` names the caller in errors.
Value stack_rows(const std::vector<Tensor>& rows, const char* op);

// For the length of a capture, tensors that hold memory (a model's parameters) name parameters
// of the program instead; they get their memory back, and lose any gradient recorded for them,
// when this goes.
class BoundTensors {
 public:
  BoundTensors() = default;
  ~BoundTensors();
  BoundTensors(const BoundTensors&) = delete;
  BoundTensors& operator=(const BoundTensors&) = delete;
  void bind(const Tensor& t, const Value& v);

 private:
  struct Saved {
    Tensor handle = {};
    std::shared_ptr<Storage> storage = {};
    Shape strides = {};
    int64_t offset = 0;
  };
  std::vector<Saved> saved_;
};

}  // namespace titan::graph
