#pragma once
// The one parallel layout of a job: the [parallelism] degrees read once (MeshDegrees::from_config,
// the only reader of those keys) and resolved once against what they split (ParallelDims). Eager
// mode's process groups (dist::DeviceMesh) and graph mode's device mesh (train/graph_mode/
// graph_sharding.h) are both derived from a ParallelDims, and every user of a layout asks it for a
// degree by axis instead of reading the config again (TorchTitan's ParallelDims).
#include <array>
#include <cstdint>
#include <string>

#include "titan/dist/dist_config.h"

namespace titan::dist {

// The mesh's dimensions, in its row-major order (tp varies fastest; the ranks are their product,
// TorchTitan's world = pp x dp_replicate x dp_shard x cp x tp), then the axes derived from them:
//   ep     expert parallelism borrows its ranks from dp_shard, as TorchTitan's does: dp_shard's
//          coordinate is efsdp's x ep + ep's (ep the inner part). The experts are split over ep,
//          and everything else is FSDP-sharded over all of dp_shard, ep's ranks included, so a
//          rank's memory falls as ep grows instead of the world growing with it.
//   efsdp  dp_shard / ep: the ranks that hold the same experts, which FSDP shards them over.
//   dp     dp_replicate x dp_shard: the ranks that read different micro-batches and average
//          gradients.
enum class MeshAxis : uint8_t { pp, dp_replicate, dp_shard, cp, tp, ep, efsdp, dp };
inline constexpr std::array<MeshAxis, 5> kMeshDims = {MeshAxis::pp, MeshAxis::dp_replicate, MeshAxis::dp_shard,
                                                      MeshAxis::cp, MeshAxis::tp};
const char* axis_name(MeshAxis axis);

// Degrees as asked for; dp_shard = -1 takes what the others leave.
struct MeshDegrees {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t ep = 1;

  // [parallelism]'s degrees. Keys that do nothing in the layout they ask for (a pipeline schedule
  // without pipeline stages, sequence parallelism without tensor parallelism) are refused, all at
  // once, naming them.
  static MeshDegrees from_config(const ParallelismConfig& p);
  // The product of the mesh's degrees, dp_shard = -1 counting as ep: the fewest ranks or devices
  // the layout needs.
  int64_t named_size() const;
};

// What a layout is resolved against, for its errors: the world's ranks (eager) or a PJRT plugin's
// devices (graph mode).
enum class MeshUnits : uint8_t { ranks, devices };

class ParallelDims {
 public:
  // Degrees without -1 (one dp_shard where it is -1): as many ranks as they multiply to.
  explicit ParallelDims(const MeshDegrees& degrees = {});
  // `degrees` over `size` ranks or devices, dp_shard = -1 taking what the others leave; throws,
  // naming the [parallelism] keys and values, when a degree is below 1, the mesh's degrees do not
  // multiply to `size`, or ep does not divide dp_shard. Needs no communication, so a launcher (or a dry run) checks a layout before anything
  // is allocated.
  ParallelDims(const MeshDegrees& degrees, int64_t size, MeshUnits units = MeshUnits::ranks);

  int64_t degree(MeshAxis axis) const;
  // The ranks or devices the layout spans: the product of the mesh's five degrees.
  int64_t size() const { return size_; }
  // The ranks or devices that split one model replica's work on a micro-batch (its pipeline
  // stages, tensor slices and sequence chunks): they share its tokens in per-device throughput.
  int64_t model_parallel() const { return degree(MeshAxis::pp) * degree(MeshAxis::tp) * degree(MeshAxis::cp); }
  // The data-parallel degrees and the others above 1: "dp_replicate 1 x dp_shard 4 (ep 2 within it) x
  // tp 2 (16 ranks)"
  std::string describe() const;

 private:
  std::array<int64_t, 6> degrees_{};  // kMeshDims', then ep
  int64_t size_ = 1;
  MeshUnits units_ = MeshUnits::ranks;
};

}  // namespace titan::dist
