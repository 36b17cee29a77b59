#pragma once
// Graph mode over several devices: the [parallelism] degrees as a mesh of the PJRT devices, and
// the shardings of the captured step's tensors on it. XLA's SPMD partitioner then splits the one
// program and inserts the collectives (the "compiler view" of FSDP and tensor parallelism):
//   parameters and AdamW's moments  FSDP on dp_shard along one dim (the first that divides, never a
//                                   stack's layer dim), and the tensor-parallel plan's split on tp
//                                   (the model's own plan, read by parallel::TpLayout); replicated
//                                   over dp_replicate (HSDP)
//   the batch                       split along the batch over dp_replicate x dp_shard
//   everything else                 replicated; the partitioner chooses the activations' layout
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/dist/parallel_dims.h"
#include "titan/graph/ir/program.h"

namespace titan::train {

using dist::MeshAxis;

// Graph mode's device mesh is the job's ParallelDims resolved over the plugin's devices
// (MeshUnits::devices): [dp_replicate, dp_shard, tp], tp innermost (TorchTitan's order), device
// (r, s, t) being number (r * dp_shard + s) * tp + t. Its other degrees are 1 (train/
// layout_checks.h refuses the parallelisms graph mode does not split).
using GraphMesh = dist::ParallelDims;

// A dim's share of a mesh axis: `parts` of its degree (0: all of it). An axis split over several
// dims (dp_shard over an expert stack's experts and rows) spreads its coordinate over them, the
// first the major part.
struct MeshSplit {
  MeshSplit(MeshAxis a, int64_t p = 0) : axis(a), parts(p) {}  // NOLINT: a whole axis reads as the axis
  MeshAxis axis;
  int64_t parts;
};

// The sharding that splits dim d of a tensor over the axes dims[d] (the first the major one) and
// replicates it over what the dims leave of each axis.
graph::Sharding mesh_sharding(const GraphMesh& mesh, const std::vector<std::vector<MeshSplit>>& dims);

// A parameter's (and its moments') sharding: split on tp along `tp_dim` (the plan's, of the
// parameter; a stack's dims shift by its layer dim), FSDP on dp_shard along the first other dim
// that divides, after the layer dim of a stack (`stacked`); when none does, over a grid of the
// other dims whose parts divide them (parallel/shard_grid.h: 8 experts over 16 devices as 8 x 2
// pieces), else along the tp dim when it divides by both. Replicated where nothing divides.
graph::Sharding parameter_sharding(const GraphMesh& mesh, const Shape& shape, bool stacked,
                                   std::optional<int64_t> tp_dim);

// A batch tensor's: split along dim 0 over dp_replicate x dp_shard.
graph::Sharding batch_sharding(const GraphMesh& mesh, int64_t rank);
// The residual stream's [batch, seq, dim] between blocks: split along the batch as the batch is,
// and under sequence parallelism (tp > 1) along the sequence over tp; whole over tp otherwise, as
// Megatron's blocks take it.
graph::Sharding carry_sharding(const GraphMesh& mesh, bool sequence_parallel);
// An activation's at a tensor-parallel region's edge (ops::keep_layout): the batch's split along
// dim 0 where it divides, and `split_dim` over tp (nullopt: whole on every tp device).
graph::Sharding activation_sharding(const GraphMesh& mesh, const Shape& shape, std::optional<int64_t> split_dim);

// What the layout should send per device per step, on paper, by the ring formulas of
// graph/collectives.h, for comparison with what the partitioner inserted:
//   FSDP  the parameters gathered for every micro-batch's forward and again for its backward, and
//         the gradients reduce-scattered once: (2 m + 1) (s-1)/s P / t
//   HSDP  the gradients' shards all-reduced over the replicas: 2 (r-1)/r P / (s t)
//   TP    per layer and micro-batch, two all-reduces of the block's activations forward and two
//         backward: 4 L m 2 (t-1)/t A, A = the device's tokens x dim x 4 bytes
// with P the parameters' bytes, m micro-batches, L layers; s, r, t the mesh's degrees.
struct PlannedTraffic {
  double fsdp = 0, hsdp = 0, tp = 0;
  double total() const { return fsdp + hsdp + tp; }
};
PlannedTraffic planned_traffic(const GraphMesh& mesh, double param_bytes, int64_t micro_batches, int64_t layers,
                               double activation_bytes);

}  // namespace titan::train
