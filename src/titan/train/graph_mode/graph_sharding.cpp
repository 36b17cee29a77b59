#include "titan/train/graph_mode/graph_sharding.h"

#include <algorithm>

#include "titan/core/error.h"
#include "titan/parallel/shard_grid.h"

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

graph::Sharding mesh_sharding(const GraphMesh& mesh, const std::vector<std::vector<MeshSplit>>& dims) {
  // Each grid dim's entries with their parts resolved, then one of what the dims leave of each axis.
  std::vector<std::vector<MeshSplit>> grid;
  int64_t given[std::size(kAxes)] = {1, 1, 1};
  graph::Sharding out;
  for (const auto& splits : dims) {
    std::vector<MeshSplit>& g = grid.emplace_back();
    int64_t n = 1;
    for (const MeshSplit& s : splits) {
      const int64_t parts = s.parts > 0 ? s.parts : mesh.degree(s.axis);
      given[axis_index(s.axis)] *= parts;
      g.emplace_back(s.axis, parts);
      n *= parts;
    }
    out.tiles.push_back(n);
  }
  std::vector<MeshSplit>& left = grid.emplace_back();
  for (MeshAxis a : kAxes) {
    const int64_t degree = mesh.degree(a), g = given[axis_index(a)];
    TITAN_CHECK(degree % g == 0, "graph mode: a sharding splits axis ", dist::axis_name(a), " into ", g,
                " parts, which do not divide its degree ", degree);
    left.emplace_back(a, degree / g);
    out.replicas *= degree / g;
  }
  if (out.replicas == mesh.size()) return {};
  // Each place in the grid [tiles..., replicas], row-major, is a coordinate per grid dim; a dim's
  // coordinate spreads over its entries, the last the minor one, and an axis's coordinate gathers
  // its entries' in grid order, the first the major one.
  std::vector<const MeshSplit*> entries;
  for (const auto& g : grid)
    for (const MeshSplit& s : g) entries.push_back(&s);
  std::vector<int64_t> sub(entries.size());
  for (int64_t place = 0; place < mesh.size(); ++place) {
    int64_t rest = place;
    size_t e = entries.size();
    for (size_t g = grid.size(); g-- > 0;) {
      int64_t extent = 1;
      for (const MeshSplit& s : grid[g]) extent *= s.parts;
      int64_t c = rest % extent;
      rest /= extent;
      for (size_t k = grid[g].size(); k-- > 0;) {
        sub[--e] = c % grid[g][k].parts;
        c /= grid[g][k].parts;
      }
    }
    int64_t coord[std::size(kAxes)] = {0, 0, 0};
    for (size_t i = 0; i < entries.size(); ++i) {
      int64_t& c = coord[axis_index(entries[i]->axis)];
      c = c * entries[i]->parts + sub[i];
    }
    out.devices.push_back((coord[0] * mesh.degree(MeshAxis::dp_shard) + coord[1]) * mesh.degree(MeshAxis::tp) + coord[2]);
  }
  return out;
}

graph::Sharding parameter_sharding(const GraphMesh& mesh, const Shape& shape, bool stacked,
                                   std::optional<int64_t> tp_dim) {
  const int64_t first = stacked ? 1 : 0, rank = static_cast<int64_t>(shape.size());
  std::vector<std::vector<MeshSplit>> dims(shape.size());
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
    if (!fsdp) {
      const parallel::ShardGrid grid = parallel::plan_shard_grid(
          shape, mesh.degree(MeshAxis::dp_shard), {.first_dim = first, .skip_dim = split, .exact = true});
      bool gridded = false;
      for (int64_t d = 0; d < rank; ++d)
        if (grid.parts[d] > 1) {
          dims[d].emplace_back(MeshAxis::dp_shard, grid.parts[d]);
          gridded = true;
        }
      if (gridded) return mesh_sharding(mesh, dims);
    }
    if (!fsdp && split && shape[*split] % (mesh.degree(MeshAxis::tp) * mesh.degree(MeshAxis::dp_shard)) == 0) fsdp = split;
    if (fsdp) dims[*fsdp].push_back(MeshAxis::dp_shard);
  }
  return mesh_sharding(mesh, dims);
}

graph::Sharding batch_sharding(const GraphMesh& mesh, int64_t rank) {
  std::vector<std::vector<MeshSplit>> dims(rank);
  dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  return mesh_sharding(mesh, dims);
}

graph::Sharding carry_sharding(const GraphMesh& mesh, bool sequence_parallel) {
  std::vector<std::vector<MeshSplit>> dims(3);
  dims[0] = {MeshAxis::dp_replicate, MeshAxis::dp_shard};
  if (sequence_parallel && mesh.degree(MeshAxis::tp) > 1) dims[1] = {MeshAxis::tp};
  return mesh_sharding(mesh, dims);
}

graph::Sharding activation_sharding(const GraphMesh& mesh, const Shape& shape, std::optional<int64_t> split_dim) {
  std::vector<std::vector<MeshSplit>> dims(shape.size());
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
