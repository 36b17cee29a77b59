#pragma once
// Collectives as differentiable ops, for plans that split activations across a group (tensor and
// sequence parallelism). Each pairs a forward collective with the one its gradient needs, as
// Megatron-LM's f and g operators do. Whether a gradient is summed or sliced on its way back
// depends on what the ranks compute after the op: the same values on every rank (replicated) or
// a part each (partial), so both kinds are offered and the plan picks.
//
// Tensors must be f32 or f64 (what dist/ carries); every rank of the group must call the op in
// the same order with the same shapes. Backward calls the collective of its gradient, so every
// rank must also run backward.
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::parallel {

// Megatron's f: identity forward; backward sums the gradient over the group (each rank's
// consumers used x for a part of the work, so each holds a part of its gradient).
Tensor copy_to_group(const Tensor& x, dist::ProcessGroup group);
// Megatron's g: forward sums the ranks' partial x over the group; backward passes the gradient
// on unchanged (every rank holds the whole of it).
Tensor reduce_from_group(const Tensor& x, dist::ProcessGroup group);

// Forward: the ranks' x concatenated along `dim` in rank order. Backward: each rank keeps its
// chunk of the sum over ranks of the gradient (the consumers were split across the group).
Tensor gather_along(const Tensor& x, int64_t dim, dist::ProcessGroup group);
// Forward: rank r gets chunk r (along `dim`) of the sum of the ranks' x. Backward: all-gather.
Tensor reduce_scatter_along(const Tensor& x, int64_t dim, dist::ProcessGroup group);

// Forward: the ranks' x concatenated along `dim`. Backward: this rank's chunk of the gradient
// as it is (the consumers computed the same values on every rank).
Tensor gather_along_replicated(const Tensor& x, int64_t dim, dist::ProcessGroup group);
// Forward: this rank's chunk of x along `dim` (x the same on every rank). Backward: all-gather.
Tensor split_along(const Tensor& x, int64_t dim, dist::ProcessGroup group);

// What this process's collectives for split activations cost, for benchmarks: bytes each rank
// sends as a ring algorithm moves them ((n - 1) / n of the gathered or scattered tensor per
// all-gather or reduce-scatter, twice that per all-reduce), and seconds blocked waiting. The ops
// wait at once, so none of that time is hidden under computation.
struct CommStats {
  int64_t calls = 0;
  double bytes_sent = 0;
  double wait_seconds = 0;
};
const CommStats& comm_stats();
void reset_comm_stats();
// Counts a collective run outside these ops (the loss's, tensor parallelism's gradient sums):
// `bytes` of the payload, `all_reduce` for the doubled ring traffic, `seconds` waited.
void count_collective(const dist::ProcessGroup& group, double bytes, bool all_reduce, double seconds);

// Reduces over `group`, in place, the gradients of `params` that have one: all started at once,
// then waited for, counted in comm_stats(). What tensor and context parallelism do after backward.
void all_reduce_gradients(const std::vector<Tensor>& params, dist::ReduceOp op, dist::ProcessGroup& group);

// The plain collectives underneath, without autograd (exposed for the ops above and tests).
Tensor all_gather_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& group);
Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& group);
Tensor chunk_of(const Tensor& x, int64_t dim, int rank, int size);

}  // namespace titan::parallel
