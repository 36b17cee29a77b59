#pragma once
// DeviceMesh: the world's ranks laid out as a ParallelDims says (parallel_dims.h), as a grid in
// the order pp, dp_replicate, dp_shard, cp, tp (row-major: tp varies fastest), with one process
// group per axis: mesh[MeshAxis::dp_shard] holds the ranks that differ only in their dp_shard
// coordinate. The derived axes: ep and efsdp split dp_shard's coordinate (efsdp x ep + ep, ep
// inner), and dp is dp_replicate x dp_shard flattened, the ranks that read different micro-batches
// and average gradients.
#include <memory>
#include <vector>

#include "titan/dist/parallel_dims.h"
#include "titan/dist/process_group.h"

namespace titan::dist {

class DeviceMesh {
 public:
  // Collective over `world` (every rank must build the same mesh): splits it into the groups of
  // each axis of degree > 1; the others are groups of one, which need no MPI. Groups inherit
  // world's timeout. `dims` must span world's ranks.
  DeviceMesh(ProcessGroup world, const ParallelDims& dims);
  // `degrees` resolved over world's ranks.
  DeviceMesh(ProcessGroup world, const MeshDegrees& degrees)
      : DeviceMesh(world, ParallelDims(degrees, world.size())) {}

  ProcessGroup& operator[](MeshAxis axis) { return groups_[static_cast<size_t>(axis)]; }
  int64_t degree(MeshAxis axis) const { return dims_.degree(axis); }
  // This rank's coordinate along `axis`: its rank in that group.
  int64_t coordinate(MeshAxis axis) const { return groups_[static_cast<size_t>(axis)].rank(); }
  const ParallelDims& dims() const { return dims_; }
  ProcessGroup& world() { return world_; }

 private:
  ProcessGroup world_;
  ParallelDims dims_;
  std::vector<ProcessGroup> groups_;  // in MeshAxis order
};

}  // namespace titan::dist
