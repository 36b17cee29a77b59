#pragma once
// The tape: each differentiable op that sees an input requiring grad records a Node holding what
// its backward needs. Nodes point at the nodes of their inputs (next_edges), so the graph is
// owned by the tensors that result from it and freed with them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

class Node;

// Where a gradient goes: input `input_nr` of `node` (the node's output index it came from).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Gradients flowing into a node, one per output of the forward op (zeros where none flowed), and
// which forward inputs want a gradient back.
struct GradContext {
  const std::vector<Tensor>& grads;
  const std::vector<bool>& needs_input_grad;
  const Tensor& operator[](size_t i) const { return grads[i]; }
  bool needs(size_t input) const { return needs_input_grad[input]; }
};

class Node {
 public:
  virtual ~Node() = default;
  // Returns one gradient per forward input (undefined where not needed).
  virtual std::vector<Tensor> apply(const GradContext& ctx) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after backward (unless the graph is retained).
  virtual void release() {}

  std::vector<Edge> next_edges;   // one per forward input
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  uint64_t sequence_nr = 0;       // creation order: later nodes run first
  // Its apply() rebuilds a graph and backpropagates through it (activation checkpointing), so
  // gradients may reach leaves from inside it at any time until it has run.
  bool rebuilds_graph = false;
  // Hooks on non-leaf outputs, by output index (Tensor::register_hook).
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> output_hooks;
};

using BackwardFn = std::function<std::vector<Tensor>(const GradContext&)>;

// A node whose backward is a closure over the saved tensors; ops write their backward inline,
// next to the forward.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(const GradContext& ctx) override;
  std::string name() const override { return name_; }
  void release() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// Sink for a leaf: runs the leaf's hooks, adds into leaf.grad, then post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const GradContext& ctx) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  Tensor leaf_;
};

// True when grad mode is on and any input requires grad: the op must record.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `outputs` as produced by `name` from `inputs`; `backward` maps output gradients to
// input gradients. Saved tensors captured in `backward` should be detach()ed outputs, to avoid a
// reference cycle output -> node -> output. No-op when no input requires grad.
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward);

// The edge that a gradient for `t` should flow along (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);

}  // namespace titan::autograd
