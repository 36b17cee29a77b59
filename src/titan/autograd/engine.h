#pragma once
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

// Reverse mode from `roots` seeded with `grads` (same shapes). Nodes run once all their consumers
// have, in reverse creation order; saved state is freed as it is consumed unless `retain_graph`.
// May be called from inside a backward (a node or a hook): that is a pass of its own.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

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

}  // namespace titan::autograd
