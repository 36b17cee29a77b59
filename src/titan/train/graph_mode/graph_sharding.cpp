#include "titan/train/graph_mode/graph_sharding.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan::train {

namespace {

constexpr MeshAxis kAxes[] = {MeshAxis::dp_replicate, MeshAxis::dp_shard, MeshAxis::tp};

// An axis's place in kAxes: its index in a device's mesh coordinate.
size_t axis_index(MeshAxis axis) {
  for (size_t i = 0; i < std::size(kAxes); ++i)
    if (kAxes[i] == axis) return i;
  TITAN_CHECK(false, "graph mode: the mesh has no axis ", dist::axis_name(axis), "; its axes are dp_replicate, dp_shard, tp");
  return 0;
}

}  // namespace

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
    for (MeshAxis a : axes) n *= mesh.degree(a);
    out.tiles.push_back(n);
  }
  for (MeshAxis a : unused) out.replicas *= mesh.degree(a);
  if (out.replicas == mesh.size()) return {};
  // Each place in the grid [tiles..., replicas], row-major, is a coordinate per grid dim; a dim's
  // coordinate spreads over its axes, the first the major one, and gives the device's mesh position.
  std::vector<std::vector<MeshAxis>> grid = dims;
  grid.push_back(unused);
  for (int64_t place = 0; place < mesh.size(); ++place) {
    int64_t rest = place, coord[3] = {0, 0, 0};
    for (size_t g = grid.size(); g-- > 0;) {
      int64_t extent = 1;
      for (MeshAxis a : grid[g]) extent *= mesh.degree(a);
      int64_t c = rest % extent;
      rest /= extent;
      for (size_t k = grid[g].size(); k-- > 0;) {
        const int64_t n = mesh.degree(grid[g][k]);
        coord[axis_index(grid[g][k])] = c % n;
        c /= n;
      }
    }
    out.devices.push_back((coord[0] * mesh.degree(MeshAxis::dp_shard) + coord[1]) * mesh.degree(MeshAxis::tp) + coord[2]);
  }
  return out;
}

graph::Sharding parameter_sharding(const GraphMesh& mesh, const Shape& shape, bool stacked,
                                   std::optional<int64_t> tp_dim) {
  const int64_t first = stacked ? 1 : 0, rank = static_cast<int64_t>(shape.size());
  std::vector<std::vector<MeshAxis>> dims(shape.size());
  std::optional<int64_t> split;
  if (tp_dim && mesh.degree(MeshAxis::tp) > 1) {
    split = *tp_dim + first;
    TITAN_CHECK(*split < rank && shape[*split] % mesh.degree(MeshAxis::tp) == 0, "graph mode: a parameter of shape ", shape_str(shape),
                " cannot split dim ", *split, " into tp = ", mesh.degree(MeshAxis::tp), " parts");
    dims[*split].push_back(MeshAxis::tp);
  }
  if (mesh.degree(MeshAxis::dp_shard) > 1) {
    std::optional<int64_t> fsdp;
    for (int64_t d = first; d < rank && !fsdp; ++d)
      if (d != split && shape[d] % mesh.degree(MeshAxis::dp_shard) == 0) fsdp = d;
    if (!fsdp && split && shape[*split] % (mesh.degree(MeshAxis::tp) * mesh.degree(MeshAxis::dp_shard)) == 0) fsdp = split;
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
  if (sequence_parallel && mesh.degree(MeshAxis::tp) > 1) dims[1] = {MeshAxis::tp};
  return mesh_sharding(mesh, dims);
}

graph::Sharding activation_sharding(const GraphMesh& mesh, const Shape& shape, std::optional<int64_t> split_dim) {
  std::vector<std::vector<MeshAxis>> dims(shape.size());
  if (!shape.empty() && shape[0] % mesh.degree(MeshAxis::dp) == 0) dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  if (split_dim && *split_dim > 0 && *split_dim < static_cast<int64_t>(shape.size()) && shape[*split_dim] % mesh.degree(MeshAxis::tp) == 0)
    dims[*split_dim].push_back(MeshAxis::tp);
  return mesh_sharding(mesh, dims);
}

PlannedTraffic planned_traffic(const GraphMesh& mesh, double param_bytes, int64_t micro_batches, int64_t layers,
                               double activation_bytes) {
  const double s = static_cast<double>(mesh.degree(MeshAxis::dp_shard)), r = static_cast<double>(mesh.degree(MeshAxis::dp_replicate)),
               t = static_cast<double>(mesh.degree(MeshAxis::tp)), m = static_cast<double>(micro_batches);
  return {.fsdp = (2 * m + 1) * (s - 1) / s * param_bytes / t,
          .hsdp = 2 * (r - 1) / r * param_bytes / (s * t),
          .tp = 4 * static_cast<double>(layers) * m * 2 * (t - 1) / t * activation_bytes};
}

}  // namespace titan::train
