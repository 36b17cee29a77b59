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

// Forward: rank r sends rows [sum(send_rows[0..d)), +send_rows[d]) of x to rank d and receives
// recv_rows[s] rows from each rank s, in rank order (dist::ProcessGroup::all_to_all_v); every
// rank's send_rows[d] must be rank d's recv_rows[r]. Backward: the reverse exchange of the
// gradient rows. Expert parallelism's token dispatch and combine.
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, dist::ProcessGroup group);

// What this process's collectives for split activations cost, for benchmarks: bytes each rank
// sends as a ring algorithm moves them ((n - 1) / n of the gathered or scattered tensor per
// all-gather or reduce-scatter, twice that per all-reduce), and seconds blocked waiting. The ops
// wait at once, so none of that time is hidden under computation.
// All-to-alls count in the totals and, apart, in the all_to_all_ figures: the bytes of the rows
// this rank sends to the other ranks (its own stay), and the seconds from start to completion.
struct CommStats {
  int64_t calls = 0;
  double bytes_sent = 0;
  double wait_seconds = 0;
  int64_t all_to_all_calls = 0;
  double all_to_all_bytes = 0;
  double all_to_all_seconds = 0;
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
// all_to_all_rows' exchange, of any dtype dist/ carries (expert parallelism's token counts too).
Tensor exchange_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, dist::ProcessGroup& group);
Tensor chunk_of(const Tensor& x, int64_t dim, int rank, int size);

}  // namespace titan::parallel
