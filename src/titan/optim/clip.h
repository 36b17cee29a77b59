#pragma once
// Gradient-norm clipping over all parameters at once, as torch.nn.utils.clip_grad_norm_.
//
// The total norm is split into a local partial and a finish so that a sharded run can combine
// the partials of all ranks in between:
//   double part = grad_norm_partial(local_params, p);
//   all-reduce `part` (sum for p = 2, max for p = inf) over the ranks that hold shards;
//   double total = grad_norm_from_partial(part, p);
//   clip_grads_with_norm_(local_params, max_norm, total);
// clip_grad_norm_ is the three in a row for one process.
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"

namespace titan::optim {

// This process's part of the norm over the gradients of `params` (those without a gradient are
// skipped), accumulated in double: the sum of squares for norm_type 2, the max |g| for inf.
double grad_norm_partial(const std::vector<Tensor>& params, double norm_type);
// The norm from the (combined) partial: its square root for 2, itself for inf.
double grad_norm_from_partial(double partial, double norm_type);
// Multiplies every gradient by max_norm / (total_norm + 1e-6) when that is below 1 (PyTorch's
// rule, the 1e-6 guarding a zero norm). A non-finite total_norm leaves the gradients alone: the
// caller sees it returned by clip_grad_norm_ and can skip the step.
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);
// What clip_grads_with_norm_ multiplies by: max_norm / (total_norm + 1e-6) when below 1, else 1.
// AdamW::step(grad_scale) takes it to clip inside its update, sparing a pass over the gradients.
double clip_coefficient(double max_norm, double total_norm);
// Returns the total norm before clipping. norm_type is 2 or INFINITY.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// Graph mode: the 2-norm of `grads` (values of the step being captured), summed in f64 as
// grad_norm_partial sums, and the clipping coefficient clip_coefficient gives for it.
graph::Value grad_norm_lowered(const std::vector<graph::Value>& grads);
graph::Value clip_coefficient_lowered(const graph::Value& total_norm, double max_norm);

}  // namespace titan::optim
