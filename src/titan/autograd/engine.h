#pragma once
#include <memory>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

class Node;

// Reverse mode from `roots` seeded with `grads` (same shapes). Nodes run once all their consumers
// have, in reverse creation order; saved state is freed as it is consumed unless `retain_graph`.
// May be called from inside a backward (a node or a hook): that is a pass of its own.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Gradients of `outputs` w.r.t. `inputs` (which must require grad), returned instead of
// accumulated into .grad. Used by gradcheck.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

// For a node whose backward rebuilds the forward graph it stands for (activation checkpointing),
// called from that node's apply() with the rebuilt `outputs`. Backpropagates `grads` through the
// nodes recorded since the calling node and hands every gradient that leaves them (for the
// node's inputs, parameters, any older tensor the rebuilt ops read) to the enclosing backward,
// one contribution at a time and in the order a backward through the original graph would have
// sent them. Hence the gradients are bit-identical to those without rebuilding, leaf hooks run
// once per backward (when the enclosing pass reaches the leaf), and autograd::grad captures
// leaves reached only inside the rebuilt graph. Outputs that do not require grad are skipped.
void backward_rebuilt(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads);

// For a caller inside a backward (a hook) that knows no more gradient will reach these leaves in
// it: FSDP, once a block's backward has run, as its parameters are used in that block alone. A
// pass with rebuilt graphs (activation checkpointing) accumulates every leaf at its end, since a
// later rebuilt graph may still send it a gradient; a released leaf whose gradient is in instead
// accumulates now (or as soon as its counted contributions are, if some are still to come), so
// its post-accumulate hooks (FSDP's reduce-scatter) run while backward goes on. A gradient that
// reaches a released leaf after it accumulated is an error naming it, never lost. Outside a
// backward, or for leaves already accumulated, nothing happens.
void release_leaves(const std::vector<Tensor>& leaves);

// ---- Split backward, for zero-bubble pipeline schedules (ZB-H1, ZBV) --------------------------
// A pipeline stage's backward in two parts: B, the gradients of the stage's input (which the
// previous stage waits for) with every activation gradient they pass through, and W, the
// gradients of the parameters, which the schedule runs later to fill its bubbles. Together they do
// the work of one backward: W starts from the activation gradients B computed and held, and
// recomputes none of them.
//
// A weight node is a leaf requiring grad that is not one of the captured inputs (a parameter), or
// a node with one gradient to give, to a weight node (an embedding, a cast or view of a
// parameter); an edge into one is a weight edge. B asks each node for the gradients of its other
// edges only, and holds each node with weight edges, with the gradients that flowed into it, for
// W to ask for the rest. The first stage's B thus computes every activation gradient down to the
// embedding, as the paper's does.

// Weight gradients that a split backward held back, for run() to compute.
class DeferredWeightGrads {
 public:
  // Computes every held gradient and accumulates it into its leaf's .grad as the unsplit backward
  // would have: same values bit for bit (contributions summed in the same order), each leaf's
  // accumulator and hooks run once for this backward, as soon as its gradient is complete. Then
  // frees what was held (the nodes' saved tensors too) and leaves this empty.
  void run();
  bool empty() const { return held_.empty(); }

  // A node with weight edges as B left it: the gradients that flowed into it and which of its
  // edges W serves. A weight node's gradients flow in W (B holds only what a root seeded).
  struct Held {
    std::shared_ptr<Node> node = {};
    std::vector<Tensor> grads = {};
    std::vector<bool> weight_edges = {};
    bool weight_node = false;
  };

 private:
  friend std::vector<Tensor> backward_split(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                            const std::vector<Tensor>&, DeferredWeightGrads&);
  // In the order B reached them, which is the order an unsplit backward runs them in.
  std::vector<Held> held_;
};

// B: backpropagates `grads` from `roots`, computing every gradient but those along weight edges,
// and returns the gradients of `inputs` (leaves requiring grad, e.g. a stage's received
// activations; in order, zeros where none flowed, as grad() returns them). `inputs` may be empty
// (the first stage); no root may be a parameter. The weight gradients are left in `deferred`
// (which must be empty) for its run(); parameters' .grad are untouched until then. Works through
// activation checkpointing: a checkpointed block's rebuilt graph is split the same way and its
// nodes are kept for W, which rebuilds nothing.
std::vector<Tensor> backward_split(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                                   const std::vector<Tensor>& inputs, DeferredWeightGrads& deferred);

}  // namespace titan::autograd
