#include "titan/nn/sharded_init.h"

namespace titan::nn::init {

namespace {
thread_local const ShardedInitScope* innermost = nullptr;
}  // namespace

void ShardTargets::add(const Tensor& handle, ShardTarget target) {
  TITAN_CHECK(handle.defined() && target.dest.defined(),
              "ShardTargets::add: the handle and the target's dest ", "must both be defined tensors");
  const std::string what = "ShardTargets::add: parameter " + handle.desc() + " -> dest " +
                           target.dest.desc() + " as box offsets " + shape_str(target.offsets) + " sizes " +
                           shape_str(target.sizes) + " of " + shape_str(target.global_shape);
  TITAN_CHECK(!target.dest.is_meta(), what, ": the dest is a meta tensor; a target must hold memory");
  TITAN_CHECK(target.dest.dtype() == handle.dtype(), what,
              ": dest and handle differ in dtype; shard a tensor into one of its own dtype so the "
              "values match a one-rank init bit for bit");
  const size_t dims = target.global_shape.size();
  TITAN_CHECK(static_cast<int64_t>(dims) == handle.dim() && target.offsets.size() == dims &&
                  target.sizes.size() == dims && static_cast<int64_t>(dims) == target.dest.dim(),
              what, ": handle, dest, global shape, offsets and sizes must have the same number of dims");
  for (size_t d = 0; d < dims; ++d)
    TITAN_CHECK(target.offsets[d] >= 0 && target.sizes[d] >= 0 &&
                    target.offsets[d] + target.sizes[d] <= target.global_shape[d] &&
                    target.sizes[d] <= target.dest.size(static_cast<int64_t>(d)),
                what, ": on dim ", d, " the box must lie inside the global shape and fit in dest");
  const bool fresh = entries_.emplace(handle.impl(), Entry{handle, std::move(target)}).second;
  TITAN_CHECK(fresh, what, ": the handle already has a target; register each parameter once");
}

const ShardTarget* ShardTargets::find(const Tensor& handle) const {
  auto it = entries_.find(handle.impl());
  return it == entries_.end() ? nullptr : &it->second.target;
}

ShardedInitScope::ShardedInitScope(const ShardTargets& targets) : targets_(&targets), previous_(innermost) {
  innermost = this;
}

ShardedInitScope::~ShardedInitScope() {
  innermost = previous_;
}

const ShardTarget* ShardedInitScope::find(const Tensor& handle) {
  for (const ShardedInitScope* s = innermost; s != nullptr; s = s->previous_)
    if (const ShardTarget* t = s->targets_->find(handle)) return t;
  return nullptr;
}

BoxRuns::BoxRuns(const ShardTarget& target)
    : offsets_(target.offsets),
      sizes_(target.sizes),
      global_strides_(contiguous_strides(target.global_shape)) {
  const Shape& global = target.global_shape;
  if (numel_of(sizes_) == 0) return;  // no runs
  size_t whole = global.size();
  while (whole > 0 && offsets_[whole - 1] == 0 && sizes_[whole - 1] == global[whole - 1]) --whole;
  if (whole == 0) {  // the whole tensor (or a 0-d one)
    count_ = 1;
    length_ = numel_of(sizes_);
    run_dim_ = global.size();
    return;
  }
  run_dim_ = whole - 1;
  length_ = sizes_[run_dim_] * global_strides_[run_dim_];
  count_ = 1;
  for (size_t d = 0; d < run_dim_; ++d) count_ *= sizes_[d];
}

int64_t BoxRuns::start(int64_t r) const {
  if (run_dim_ == offsets_.size()) return 0;
  // r counts row-major over the box's dims before run_dim_.
  int64_t start = offsets_[run_dim_] * global_strides_[run_dim_];
  for (size_t d = run_dim_; d-- > 0;) {
    start += (offsets_[d] + r % sizes_[d]) * global_strides_[d];
    r /= sizes_[d];
  }
  return start;
}

}  // namespace titan::nn::init
