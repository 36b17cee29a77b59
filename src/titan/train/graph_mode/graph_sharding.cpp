#include "titan/train/graph_mode/graph_sharding.h"

#include <algorithm>
#include <sstream>

#include "titan/core/error.h"

namespace titan::train {

namespace {

constexpr MeshAxis kAxes[] = {MeshAxis::dp_replicate, MeshAxis::dp_shard, MeshAxis::tp};

}  // namespace

int64_t GraphMesh::size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::dp_replicate: return dp_replicate;
    case MeshAxis::dp_shard: return dp_shard;
    case MeshAxis::tp: return tp;
  }
  return 1;
}

std::string GraphMesh::describe() const {
  std::ostringstream os;
  os << "dp_replicate " << dp_replicate << " x dp_shard " << dp_shard << " x tp " << tp << " (" << devices()
     << (devices() == 1 ? " device)" : " devices)");
  return os.str();
}

GraphMesh graph_mesh(const dist::ParallelismConfig& p, int64_t devices) {
  std::string refused;
  for (const auto& [key, degree] : {std::pair<const char*, int64_t>{"context_parallel_degree", p.context_parallel_degree},
                                    {"pipeline_parallel_degree", p.pipeline_parallel_degree},
                                    {"expert_parallel_degree", p.expert_parallel_degree}})
    if (degree > 1)
      refused += "\n  parallelism." + std::string(key) + " = " + std::to_string(degree) +
                 ": graph mode splits its step over data-parallel (replicate, shard) and tensor-parallel "
                 "degrees only; set it to 1, or compile.enable = false";
  TITAN_CHECK(refused.empty(), "[parallelism] with compile.mode = \"graph\":", refused);
  GraphMesh mesh{.dp_replicate = p.data_parallel_replicate_degree, .dp_shard = p.data_parallel_shard_degree,
                 .tp = p.tensor_parallel_degree};
  const int64_t others = mesh.dp_replicate * mesh.tp;
  TITAN_CHECK(mesh.dp_replicate >= 1 && mesh.tp >= 1 && devices % others == 0,
              "[parallelism] with compile.mode = \"graph\": data_parallel_replicate_degree = ", mesh.dp_replicate,
              " x tensor_parallel_degree = ", mesh.tp, " = ", others, " does not divide the ", devices,
              " devices of the plugin; pick degrees whose product divides it (the CPU plugin's count is "
              "compile.plugin_options \"cpu_device_count=N\")");
  if (mesh.dp_shard == -1) mesh.dp_shard = devices / others;
  TITAN_CHECK(mesh.devices() == devices, "[parallelism] with compile.mode = \"graph\": the degrees ",
              mesh.describe(), " do not multiply to the ", devices,
              " devices of the plugin; set data_parallel_shard_degree = -1 to take the devices the others leave, "
              "or change the degrees (the CPU plugin's count is compile.plugin_options \"cpu_device_count=N\")");
  return mesh;
}

graph::Sharding mesh_sharding(const GraphMesh& mesh, const std::vector<std::vector<MeshAxis>>& dims) {
  std::vector<MeshAxis> unused;
  for (MeshAxis a : kAxes) {
    bool named = false;
    for (const auto& axes : dims) named = named || std::find(axes.begin(), axes.end(), a) != axes.end();
    if (!named) unused.push_back(a);
  }
  graph::Sharding out;
  for (const auto& axes : dims) {
    int64_t n = 1;
    for (MeshAxis a : axes) n *= mesh.size(a);
    out.tiles.push_back(n);
  }
  for (MeshAxis a : unused) out.replicas *= mesh.size(a);
  if (out.replicas == mesh.devices()) return {};
  // Each place in the grid [tiles..., replicas], row-major, is a coordinate per grid dim; a dim's
  // coordinate spreads over its axes, the first the major one, and gives the device's mesh position.
  std::vector<std::vector<MeshAxis>> grid = dims;
  grid.push_back(unused);
  for (int64_t place = 0; place < mesh.devices(); ++place) {
    int64_t rest = place, coord[3] = {0, 0, 0};
    for (size_t g = grid.size(); g-- > 0;) {
      int64_t extent = 1;
      for (MeshAxis a : grid[g]) extent *= mesh.size(a);
      int64_t c = rest % extent;
      rest /= extent;
      for (size_t k = grid[g].size(); k-- > 0;) {
        const int64_t n = mesh.size(grid[g][k]);
        coord[static_cast<int>(grid[g][k])] = c % n;
        c /= n;
      }
    }
    out.devices.push_back((coord[0] * mesh.dp_shard + coord[1]) * mesh.tp + coord[2]);
  }
  return out;
}

graph::Sharding parameter_sharding(const GraphMesh& mesh, const Shape& shape, bool stacked,
                                   std::optional<int64_t> tp_dim) {
  const int64_t first = stacked ? 1 : 0, rank = static_cast<int64_t>(shape.size());
  std::vector<std::vector<MeshAxis>> dims(shape.size());
  std::optional<int64_t> split;
  if (tp_dim && mesh.tp > 1) {
    split = *tp_dim + first;
    TITAN_CHECK(*split < rank && shape[*split] % mesh.tp == 0, "graph mode: a parameter of shape ", shape_str(shape),
                " cannot split dim ", *split, " into tp = ", mesh.tp, " parts");
    dims[*split].push_back(MeshAxis::tp);
  }
  if (mesh.dp_shard > 1) {
    std::optional<int64_t> fsdp;
    for (int64_t d = first; d < rank && !fsdp; ++d)
      if (d != split && shape[d] % mesh.dp_shard == 0) fsdp = d;
    if (!fsdp && split && shape[*split] % (mesh.tp * mesh.dp_shard) == 0) fsdp = split;
    if (fsdp) dims[*fsdp].push_back(MeshAxis::dp_shard);
  }
  return mesh_sharding(mesh, dims);
}

graph::Sharding batch_sharding(const GraphMesh& mesh, int64_t rank) {
  std::vector<std::vector<MeshAxis>> dims(rank);
  dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  return mesh_sharding(mesh, dims);
}

graph::Sharding carry_sharding(const GraphMesh& mesh, bool sequence_parallel) {
  std::vector<std::vector<MeshAxis>> dims(3);
  dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  if (sequence_parallel && mesh.tp > 1) dims[1] = {MeshAxis::tp};
  return mesh_sharding(mesh, dims);
}

graph::Sharding activation_sharding(const GraphMesh& mesh, const Shape& shape, std::optional<int64_t> split_dim) {
  std::vector<std::vector<MeshAxis>> dims(shape.size());
  if (!shape.empty() && shape[0] % mesh.dp() == 0) dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  if (split_dim && *split_dim > 0 && *split_dim < static_cast<int64_t>(shape.size()) && shape[*split_dim] % mesh.tp == 0)
    dims[*split_dim].push_back(MeshAxis::tp);
  return mesh_sharding(mesh, dims);
}

PlannedTraffic planned_traffic(const GraphMesh& mesh, double param_bytes, int64_t micro_batches, int64_t layers,
                               double activation_bytes) {
  const double s = static_cast<double>(mesh.dp_shard), r = static_cast<double>(mesh.dp_replicate),
               t = static_cast<double>(mesh.tp), m = static_cast<double>(micro_batches);
  return {.fsdp = (2 * m + 1) * (s - 1) / s * param_bytes / t,
          .hsdp = 2 * (r - 1) / r * param_bytes / (s * t),
          .tp = 4 * static_cast<double>(layers) * m * 2 * (t - 1) / t * activation_bytes};
}

}  // namespace titan::train
