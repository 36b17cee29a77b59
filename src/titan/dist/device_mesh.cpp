#include "titan/dist/device_mesh.h"

#include <sstream>

namespace titan::dist {

namespace {

std::string layout(const std::array<int64_t, 6>& d) {
  std::ostringstream os;
  for (size_t i = 0; i < d.size(); ++i) os << (i ? " x " : "") << DeviceMesh::kDims[i] << " " << d[i];
  return os.str();
}

}  // namespace

std::array<int64_t, 6> DeviceMesh::resolve(const MeshDegrees& m, int world_size) {
  std::array<int64_t, 6> d = {m.pp, m.dp_replicate, m.dp_shard, m.cp, m.tp, m.ep};
  int64_t others = 1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i == 2 && d[i] == -1) continue;
    config::require(d[i] >= 1, "device mesh: degree of ", kDims[i], " is ", d[i],
                    "; every degree must be at least 1 (dp_shard may be -1: the ranks left over)");
    others *= d[i];
  }
  if (d[2] == -1) {
    config::require(world_size % others == 0, "device mesh: ", world_size, " ranks cannot be split as ",
                    layout(d), ": the other degrees multiply to ", others,
                    ", which does not divide the world; launch a multiple of ", others,
                    " ranks, or change the [parallelism] degrees");
    d[2] = world_size / others;
  }
  int64_t product = 1;
  for (int64_t x : d) product *= x;
  config::require(product == world_size, "device mesh: ", layout(d), " needs ", product, " ranks, but ",
                  world_size, " were launched; make the [parallelism] degrees multiply to ", world_size,
                  " (data_parallel_shard_degree = -1 takes the ranks left over)");
  return d;
}

std::unique_ptr<DeviceMesh> DeviceMesh::from_config(ProcessGroup world, const ParallelismConfig& p,
                                                    const CommConfig& comm) {
  std::string refused;
  // The pipeline's own keys mean nothing without pipeline stages.
  const ParallelismConfig defaults;
  if (p.pipeline_parallel_degree == 1 && p.pipeline_parallel_schedule != defaults.pipeline_parallel_schedule)
    refused += "\n  parallelism.pipeline_parallel_schedule = \"" + p.pipeline_parallel_schedule +
               "\": there are no pipeline stages to schedule; drop the key";
  // So are tensor parallelism's without tp ranks.
  if (p.tensor_parallel_degree == 1 && p.enable_sequence_parallel != defaults.enable_sequence_parallel)
    refused +=
        "\n  parallelism.enable_sequence_parallel = false: there is no tensor parallelism to run without "
        "sequence parallelism; drop the key";
  if (p.tensor_parallel_degree == 1 && p.disable_loss_parallel != defaults.disable_loss_parallel)
    refused +=
        "\n  parallelism.disable_loss_parallel = true: there is no tensor parallelism whose loss could be "
        "parallel; drop the key";
  if (p.pipeline_parallel_degree == 1 && !p.pipeline_parallel_split_points.empty())
    refused += "\n  parallelism.pipeline_parallel_split_points = \"" + p.pipeline_parallel_split_points +
               "\": there are no pipeline stages to split; drop the key";
  if (p.pipeline_parallel_degree == 1 &&
      p.pipeline_parallel_microbatch_size != defaults.pipeline_parallel_microbatch_size)
    refused += "\n  parallelism.pipeline_parallel_microbatch_size = " +
               std::to_string(p.pipeline_parallel_microbatch_size) +
               ": there are no pipeline stages to feed; drop the key";
  config::require(refused.empty(), "[parallelism] sets keys that do nothing in this layout:", refused);
  const MeshDegrees degrees{.pp = p.pipeline_parallel_degree,
                            .dp_replicate = p.data_parallel_replicate_degree,
                            .dp_shard = p.data_parallel_shard_degree,
                            .cp = p.context_parallel_degree,
                            .tp = p.tensor_parallel_degree,
                            .ep = p.expert_parallel_degree};
  try {
    resolve(degrees, world.size());
  } catch (const Error& e) {
    throw Error(
        "parallelism.pipeline_parallel_degree = " + std::to_string(p.pipeline_parallel_degree) +
        ", parallelism.data_parallel_replicate_degree = " + std::to_string(p.data_parallel_replicate_degree) +
        ", parallelism.data_parallel_shard_degree = " + std::to_string(p.data_parallel_shard_degree) +
        ", parallelism.tensor_parallel_degree = " + std::to_string(p.tensor_parallel_degree) +
        ", parallelism.context_parallel_degree = " + std::to_string(p.context_parallel_degree) +
        ", parallelism.expert_parallel_degree = " + std::to_string(p.expert_parallel_degree) + ": " +
        e.message());
  }
  world.set_timeout_seconds(comm.timeout_seconds);
  return std::make_unique<DeviceMesh>(std::move(world), degrees);
}

DeviceMesh::DeviceMesh(ProcessGroup world, const MeshDegrees& degrees)
    : world_(std::move(world)), degrees_(resolve(degrees, world_.size())) {
  // Row-major coordinates of this rank; a dimension's group is the ranks whose other
  // coordinates match, so its color is the rank with that coordinate zeroed.
  const int64_t rank = world_.rank();
  std::array<int64_t, 6> stride{}, coord{};
  int64_t s = 1;
  for (size_t i = degrees_.size(); i-- > 0;) {
    stride[i] = s;
    coord[i] = (rank / s) % degrees_[i];
    s *= degrees_[i];
  }
  auto group_of = [&](int64_t degree, int64_t color, int64_t key, const std::string& name) {
    // A simulated world (a dry run) knows its coordinates without asking the other ranks.
    if (world_.is_simulated())
      return ProcessGroup::simulated(static_cast<int>(key), static_cast<int>(degree), name);
    if (degree == 1) {
      ProcessGroup g = ProcessGroup::single(name);
      g.set_timeout_seconds(world_.timeout_seconds());
      return g;
    }
    return world_.split(static_cast<int>(color), static_cast<int>(key), name);
  };
  for (size_t i = 0; i < degrees_.size(); ++i)
    groups_.push_back(group_of(degrees_[i], rank - coord[i] * stride[i], coord[i], kDims[i]));
  // dp_replicate and dp_shard are neighbours, so "dp" is one block of coordinates.
  const int64_t dp_coord = coord[1] * degrees_[2] + coord[2];
  groups_.push_back(group_of(degrees_[1] * degrees_[2], rank - dp_coord * stride[2], dp_coord, "dp"));
  // The ranks that read different data: dp's and, within each, the ep ranks; dp's own group
  // without ep.
  const int64_t batch_coord = dp_coord * degrees_[5] + coord[5];
  groups_.push_back(degrees_[5] == 1
                        ? groups_.back()
                        : group_of(degrees_[1] * degrees_[2] * degrees_[5],
                                   rank - dp_coord * stride[2] - coord[5] * stride[5], batch_coord, "batch"));
}

size_t DeviceMesh::index_of(const std::string& dim) const {
  for (size_t i = 0; i < kDims.size(); ++i)
    if (dim == kDims[i]) return i;
  if (dim == "batch") return kDims.size() + 1;
  TITAN_CHECK(
      dim == "dp", "device mesh: no dimension '", dim,
      "'; the dimensions are pp, dp_replicate, dp_shard, cp, tp, ep, dp (dp_replicate x dp_shard) and "
      "batch (dp_replicate x dp_shard x ep)");
  return kDims.size();
}

ProcessGroup& DeviceMesh::operator[](const std::string& dim) {
  return groups_[index_of(dim)];
}

int64_t DeviceMesh::degree(const std::string& dim) const {
  const size_t i = index_of(dim);
  if (i < kDims.size()) return degrees_[i];
  return degrees_[1] * degrees_[2] * (i == kDims.size() ? 1 : degrees_[5]);
}

int64_t DeviceMesh::coordinate(const std::string& dim) const {
  return groups_[index_of(dim)].rank();
}

}  // namespace titan::dist
