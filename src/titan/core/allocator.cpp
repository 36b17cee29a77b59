#include "titan/core/allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "titan/core/error.h"

namespace titan {

struct CpuAllocator::Impl {
  mutable std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  MemoryStats stats;
  bool caching = true;
};

CpuAllocator& CpuAllocator::instance() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

CpuAllocator::CpuAllocator() : impl_(new Impl) {
  const char* env = std::getenv("TITAN_ALLOCATOR_CACHING");
  impl_->caching = !(env && env[0] == '0');
}

// Small blocks round to 64 bytes; larger ones to a quarter of their power-of-two octave, which
// bounds the waste at 25% while letting nearly equal sizes share a list.
size_t CpuAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  if (nbytes <= 4096) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  size_t octave = std::bit_floor(nbytes);
  size_t step = octave / 4;
  return (nbytes + step - 1) / step * step;
}

void* CpuAllocator::allocate(size_t nbytes) {
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  MemoryStats& s = impl_->stats;
  s.num_allocs++;
  void* p = nullptr;
  auto it = impl_->free_lists.find(size);
  if (it != impl_->free_lists.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    s.num_cache_hits++;
  } else {
    p = std::aligned_alloc(kAlignment, size);
    if (!p && impl_->caching) {  // give the cache back and try once more before failing
      for (auto& [sz, list] : impl_->free_lists) {
        for (void* q : list) std::free(q);
        s.reserved_bytes -= static_cast<int64_t>(sz * list.size());
        list.clear();
      }
      p = std::aligned_alloc(kAlignment, size);
    }
    TITAN_CHECK(p != nullptr, "CpuAllocator: out of memory allocating ", nbytes, " bytes (",
                s.allocated_bytes, " bytes already in use); reduce batch size or sequence length");
    s.reserved_bytes += static_cast<int64_t>(size);
  }
  s.allocated_bytes += static_cast<int64_t>(size);
  if (s.allocated_bytes > s.peak_allocated_bytes) s.peak_allocated_bytes = s.allocated_bytes;
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.allocated_bytes -= static_cast<int64_t>(size);
  if (impl_->caching) {
    impl_->free_lists[size].push_back(ptr);
  } else {
    std::free(ptr);
    impl_->stats.reserved_bytes -= static_cast<int64_t>(size);
  }
}

MemoryStats CpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void CpuAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [sz, list] : impl_->free_lists) {
    for (void* q : list) std::free(q);
    impl_->stats.reserved_bytes -= static_cast<int64_t>(sz * list.size());
  }
  impl_->free_lists.clear();
}

}  // namespace titan
