#pragma once
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

// Reverse mode from `roots` seeded with `grads` (same shapes). Nodes run once all their consumers
// have, in reverse creation order; saved state is freed as it is consumed unless `retain_graph`.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

// Gradients of `outputs` w.r.t. `inputs` (which must require grad), returned instead of
// accumulated into .grad. Used by gradcheck.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

}  // namespace titan::autograd
