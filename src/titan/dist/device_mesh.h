#pragma once
// DeviceMesh: the world's ranks laid out as a grid with named dimensions, in the order
//   pp, dp_replicate, dp_shard, cp, tp, ep
// (row-major: ep varies fastest), and one process group per dimension: mesh["dp_shard"] holds
// the ranks that differ only in their dp_shard coordinate. mesh["dp"] is dp_replicate x dp_shard
// flattened, the group data-parallel ranks average gradients over; mesh["batch"] is
// dp_replicate x dp_shard x ep flattened, the ranks that read different micro-batches (expert
// parallel ranks are data-parallel ranks for the parameters outside the experts); it is "dp"
// when ep is 1.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/dist/dist_config.h"
#include "titan/dist/process_group.h"

namespace titan::dist {

// Degrees of each dimension; dp_shard = -1 takes the ranks the others leave.
struct MeshDegrees {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t ep = 1;
};

class DeviceMesh {
 public:
  static constexpr std::array<const char*, 6> kDims = {"pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"};

  // The degrees with dp_shard resolved against `world_size`; throws when a degree is below 1 or
  // their product is not world_size. Needs no communication, so a launcher can check a layout
  // before anything is allocated.
  static std::array<int64_t, 6> resolve(const MeshDegrees& degrees, int world_size);

  // The mesh [parallelism] asks for over `world`, its groups with [comm]'s timeout; degrees of
  // parallelisms titan does not have yet are refused, naming their keys, before any
  // communication. Collective, as the constructor.
  static std::unique_ptr<DeviceMesh> from_config(ProcessGroup world, const ParallelismConfig& parallelism,
                                                 const CommConfig& comm);

  // Collective over `world` (every rank must build the same mesh): splits it into the groups of
  // each dimension of degree > 1; the others are groups of one, which need no MPI. Groups inherit
  // world's timeout.
  DeviceMesh(ProcessGroup world, const MeshDegrees& degrees);

  // The group of dimension `dim` (one of kDims, "dp" or "batch"); throws on another name.
  ProcessGroup& operator[](const std::string& dim);
  int64_t degree(const std::string& dim) const;
  // This rank's coordinate along `dim`: its rank in that group.
  int64_t coordinate(const std::string& dim) const;
  ProcessGroup& world() { return world_; }

 private:
  size_t index_of(const std::string& dim) const;

  ProcessGroup world_;
  std::array<int64_t, 6> degrees_{};
  std::vector<ProcessGroup> groups_;  // kDims order, then "dp", then "batch"
};

}  // namespace titan::dist
