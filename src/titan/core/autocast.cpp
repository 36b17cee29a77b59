#include "titan/core/autocast.h"

#include "titan/core/error.h"

namespace titan {

namespace {
thread_local DType current = kF32;
thread_local AutocastCastCache* open_cache = nullptr;
}

DType autocast_dtype() {
  return current;
}

AutocastGuard::AutocastGuard(DType dtype) : previous_(current) {
  TITAN_CHECK(dtype == kF32 || dtype == kBF16, "AutocastGuard: expected f32 (off) or bf16, got ",
              dtype_name(dtype));
  current = dtype;
}

AutocastGuard::~AutocastGuard() {
  current = previous_;
}

int64_t AutocastCasts::bytes() const {
  int64_t total = 0;
  for (const auto& [key, copy] : copies_) total += static_cast<int64_t>(copy.second.nbytes());
  return total;
}

AutocastCastCache::AutocastCastCache() : casts_(&own_), previous_(open_cache) {
  open_cache = this;
}

AutocastCastCache::AutocastCastCache(AutocastCasts& casts) : casts_(&casts), previous_(open_cache) {
  open_cache = this;
}

AutocastCastCache::~AutocastCastCache() {
  open_cache = previous_;
}

Tensor autocast_cast(const Tensor& x, DType dtype) {
  if (open_cache == nullptr || x.dtype() == dtype || x.is_lazy() || x.is_meta() || !x.is_leaf() ||
      !x.requires_grad())
    return x.detach().to(dtype);
  const std::pair<const TensorImpl*, DType> key{x.impl(), dtype};
  auto& copies = open_cache->casts_->copies_;
  if (auto it = copies.find(key); it != copies.end()) return it->second.second;
  Tensor copy = x.detach().to(dtype);
  copies.emplace(key, std::pair{x, copy});
  return copy;
}

}  // namespace titan
