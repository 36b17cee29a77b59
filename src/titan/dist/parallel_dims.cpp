#include "titan/dist/parallel_dims.h"

#include <sstream>

#include "titan/core/error.h"

namespace titan::dist {

namespace {

constexpr const char* kKeys[] = {"pipeline_parallel_degree", "data_parallel_replicate_degree",
                                 "data_parallel_shard_degree", "context_parallel_degree",
                                 "tensor_parallel_degree",     "expert_parallel_degree"};

// The data-parallel degrees always, the others where they split anything: "dp_replicate 1 x
// dp_shard 4 (ep 2 within it) x tp 2".
std::string layout(const std::array<int64_t, 6>& d) {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < kMeshDims.size(); ++i) {
    const MeshAxis axis = kMeshDims[i];
    if (d[i] == 1 && axis != MeshAxis::dp_replicate && axis != MeshAxis::dp_shard) continue;
    os << (first ? "" : " x ") << axis_name(axis) << " " << d[i];
    if (axis == MeshAxis::dp_shard && d[5] > 1) os << " (ep " << d[5] << " within it)";
    first = false;
  }
  return os.str();
}

// "parallelism.pipeline_parallel_degree = 1, ...": what the user wrote, for every error.
std::string keys(const std::array<int64_t, 6>& d) {
  std::string out;
  for (size_t i = 0; i < d.size(); ++i)
    out += std::string(i ? ", " : "") + "parallelism." + kKeys[i] + " = " + std::to_string(d[i]);
  return out;
}

}  // namespace

const char* axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::pp: return "pp";
    case MeshAxis::dp_replicate: return "dp_replicate";
    case MeshAxis::dp_shard: return "dp_shard";
    case MeshAxis::cp: return "cp";
    case MeshAxis::tp: return "tp";
    case MeshAxis::ep: return "ep";
    case MeshAxis::efsdp: return "efsdp";
    case MeshAxis::dp: return "dp";
  }
  return "?";
}

MeshDegrees MeshDegrees::from_config(const ParallelismConfig& p) {
  std::string refused;
  const ParallelismConfig defaults;
  // The pipeline's own keys mean nothing without pipeline stages.
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
  config::require(p.expert_tensor_parallel_degree == 1, "parallelism.expert_tensor_parallel_degree = ",
                  p.expert_tensor_parallel_degree,
                  ": titan keeps each expert whole over the tensor-parallel ranks (TorchTitan's value 1); set it to 1");
  return {.pp = p.pipeline_parallel_degree,
          .dp_replicate = p.data_parallel_replicate_degree,
          .dp_shard = p.data_parallel_shard_degree,
          .cp = p.context_parallel_degree,
          .tp = p.tensor_parallel_degree,
          .ep = p.expert_parallel_degree};
}

int64_t MeshDegrees::named_size() const {
  return pp * dp_replicate * (dp_shard == -1 ? ep : dp_shard) * cp * tp;
}

ParallelDims::ParallelDims(const MeshDegrees& degrees)
    : ParallelDims(degrees, MeshDegrees{degrees}.named_size()) {}

ParallelDims::ParallelDims(const MeshDegrees& m, int64_t size, MeshUnits units) : size_(size), units_(units) {
  std::array<int64_t, 6> d = {m.pp, m.dp_replicate, m.dp_shard, m.cp, m.tp, m.ep};
  const bool ranks = units == MeshUnits::ranks;
  const std::string whole = ranks ? "the world of " + std::to_string(size) + " ranks"
                                  : "the " + std::to_string(size) + " devices of the plugin";
  int64_t others = 1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i == 2 && d[i] == -1) continue;
    config::require(d[i] >= 1, keys(d), ": degree of ", i < kMeshDims.size() ? axis_name(kMeshDims[i]) : "ep",
                    " is ", d[i], "; every degree must be at least 1 (data_parallel_shard_degree may be -1: the ",
                    ranks ? "ranks" : "devices", " left over)");
    if (i < kMeshDims.size()) others *= d[i];
  }
  if (d[2] == -1) {
    config::require(size % others == 0, keys(d), ": the other degrees (", layout(d), ") multiply to ", others,
                    ", which does not divide ", whole, "; ",
                    ranks ? "launch a multiple of " + std::to_string(others) + " ranks, or change the degrees"
                          : "pick degrees whose product divides it (the CPU plugin's count is "
                            "compile.plugin_options \"cpu_device_count=N\")");
    d[2] = size / others;
  }
  int64_t product = 1;
  for (size_t i = 0; i < kMeshDims.size(); ++i) product *= d[i];
  if (ranks)
    config::require(product == size, keys(d), ": ", layout(d), " needs ", product, " ranks, but ", size,
                    " were launched; make the [parallelism] degrees multiply to ", size,
                    " (data_parallel_shard_degree = -1 takes the ranks left over)");
  else
    config::require(product == size, keys(d), ": the degrees ", layout(d), " (", product,
                    " devices) do not multiply to ", whole,
                    "; set data_parallel_shard_degree = -1 to take the devices the others leave, or change the "
                    "degrees (the CPU plugin's count is compile.plugin_options \"cpu_device_count=N\")");
  config::require(d[2] % d[5] == 0, keys(d), ": expert parallelism borrows its ranks from dp_shard (as "
                  "TorchTitan's does: the experts are split over ep, everything else sharded over all of dp_shard), so ",
                  "expert_parallel_degree = ", d[5], " must divide data_parallel_shard_degree = ", d[2],
                  "; raise data_parallel_shard_degree to a multiple of ", d[5],
                  " (-1 takes the ranks the others leave) or lower expert_parallel_degree");
  degrees_ = d;
}

int64_t ParallelDims::degree(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::efsdp: return degrees_[2] / degrees_[5];
    case MeshAxis::dp: return degrees_[1] * degrees_[2];
    default: return degrees_[static_cast<size_t>(axis)];
  }
}

std::string ParallelDims::describe() const {
  const char* unit = units_ == MeshUnits::ranks ? (size_ == 1 ? "rank" : "ranks") : (size_ == 1 ? "device" : "devices");
  return layout(degrees_) + " (" + std::to_string(size_) + " " + unit + ")";
}

}  // namespace titan::dist
