#include "titan/dist/device_mesh.h"

#include <array>

namespace titan::dist {

DeviceMesh::DeviceMesh(ProcessGroup world, const ParallelDims& dims) : world_(std::move(world)), dims_(dims) {
  TITAN_CHECK(dims_.size() == world_.size(), "device mesh: the layout ", dims_.describe(), " does not span the ",
              world_.size(), " ranks of the world it is laid over");
  std::array<int64_t, kMeshDims.size()> degrees{};
  for (size_t i = 0; i < kMeshDims.size(); ++i) degrees[i] = dims_.degree(kMeshDims[i]);
  // Row-major coordinates of this rank; a dimension's group is the ranks whose other
  // coordinates match, so its color is the rank with that coordinate zeroed.
  const int64_t rank = world_.rank();
  std::array<int64_t, kMeshDims.size()> stride{}, coord{};
  int64_t s = 1;
  for (size_t i = degrees.size(); i-- > 0;) {
    stride[i] = s;
    coord[i] = (rank / s) % degrees[i];
    s *= degrees[i];
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
  for (size_t i = 0; i < degrees.size(); ++i)
    groups_.push_back(group_of(degrees[i], rank - coord[i] * stride[i], coord[i], axis_name(kMeshDims[i])));
  // ep is dp_shard's inner part, efsdp its outer: each a block of dp_shard's coordinates.
  const int64_t ep = dims_.degree(MeshAxis::ep), ep_coord = coord[2] % ep, efsdp_coord = coord[2] / ep;
  groups_.push_back(group_of(ep, rank - ep_coord * stride[2], ep_coord, "ep"));
  groups_.push_back(group_of(degrees[2] / ep, rank - efsdp_coord * ep * stride[2], efsdp_coord, "efsdp"));
  // dp_replicate and dp_shard are neighbours, so "dp" is one block of coordinates.
  const int64_t dp_coord = coord[1] * degrees[2] + coord[2];
  groups_.push_back(group_of(degrees[1] * degrees[2], rank - dp_coord * stride[2], dp_coord, "dp"));
}

}  // namespace titan::dist
