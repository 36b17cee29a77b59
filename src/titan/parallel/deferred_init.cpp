#include "titan/parallel/deferred_init.h"

#include <map>
#include <set>

#include "titan/core/memory_owner.h"
#include "titan/core/meta.h"

namespace titan::parallel {

namespace {
std::map<std::string, FullyShard::ParamShard> shards_by_name(const FullyShard* fsdp) {
  std::map<std::string, FullyShard::ParamShard> out;
  if (fsdp)
    for (FullyShard::ParamShard& s : fsdp->param_shards()) out.emplace(s.name, std::move(s));
  return out;
}

void materialize(const Tensor& t) {
  if (t.is_meta()) t.storage()->materialize();  // tied tensors share a storage: once
}
}  // namespace

void materialize_meta_tensors(nn::Module& model, const FullyShard* fsdp) {
  const MetaScope real(false);
  std::set<std::string> persistent;
  for (const auto& [name, t] : model.named_buffers(true)) persistent.insert(name);
  {
    const MemoryOwnerScope owner(MemoryCategory::other, intern_memory_owner_name("buffers"));
    for (const auto& [name, b] : model.named_buffers()) {
      TITAN_CHECK(!b.is_meta() || persistent.contains(name), "deferred_init: non-persistent buffer ", name,
                  " (", b.desc(),
                  ") is a meta tensor; a buffer left out of the state dict is computed at construction, "
                  "so compute it under MetaScope(false) (as ops::RopeTable::build does)");
      materialize(b);
    }
  }
  const auto sharded = shards_by_name(fsdp);
  const MemoryOwnerScope owner(MemoryCategory::parameters);
  for (const auto& [name, p] : model.named_parameters())
    if (!sharded.contains(name)) materialize(p);
  // The whole shard, padding included, in zeroed memory.
  for (const auto& [name, s] : sharded) materialize(s.shard);
}

nn::init::ShardTargets shard_targets(nn::Module& model, const FullyShard* fsdp, const SliceOf& slice_of) {
  const auto sharded = shards_by_name(fsdp);
  nn::init::ShardTargets targets;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::optional<GlobalSlice> slice = slice_of ? slice_of(name, p) : std::nullopt;
    if (slice) {
      TITAN_CHECK(slice->global_shape.size() == p.sizes().size() && slice->offsets.size() == p.sizes().size(),
                  "deferred_init: parameter ", name, " is ", p.desc(), " but its slice says offsets ",
                  shape_str(slice->offsets), " of ", shape_str(slice->global_shape),
                  "; a slice has one offset per dim of the handle");
    }
    auto it = sharded.find(name);
    if (it == sharded.end()) {
      if (slice) {
        targets.add(p, {.dest = p.detach(),
                        .global_shape = slice->global_shape,
                        .offsets = slice->offsets,
                        .sizes = p.sizes()});
      }
      continue;
    }
    const FullyShard::ParamShard& s = it->second;
    nn::init::ShardTarget t{.dest = s.shard,
                            .global_shape = s.where.global_shape,
                            .offsets = s.where.offsets,
                            .sizes = s.where.sizes};
    if (slice) {
      for (size_t d = 0; d < t.offsets.size(); ++d) t.offsets[d] += slice->offsets[d];
      t.global_shape = slice->global_shape;
    }
    targets.add(p, std::move(t));
  }
  return targets;
}

void deferred_init(nn::Module& model, Generator& gen, const FullyShard* fsdp, const SliceOf& slice_of) {
  const MetaScope real(false);
  materialize_meta_tensors(model, fsdp);
  const nn::init::ShardTargets targets = shard_targets(model, fsdp, slice_of);
  const nn::init::ShardedInitScope scope(targets);
  model.init_weights(gen);
}

}  // namespace titan::parallel
