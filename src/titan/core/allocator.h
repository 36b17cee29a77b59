#pragma once
// A caching allocator for host memory. Training allocates the same activation sizes every step;
// keeping freed blocks in per-size free lists turns those into list pops instead of page faults.
// Every block is 64-byte aligned (one cache line, one AVX-512 vector).
#include <cstddef>
#include <cstdint>

namespace titan {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors now
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes since the last reset
  int64_t reserved_bytes = 0;        // allocated + cached in free lists
  int64_t num_allocs = 0;            // requests served
  int64_t num_cache_hits = 0;        // of those, served from a free list
};

class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  // The process-wide instance. Caching is on unless TITAN_ALLOCATOR_CACHING=0 (the sanitizer
  // build sets it, so use-after-free is caught instead of hidden by reuse).
  static CpuAllocator& instance();

  void* allocate(size_t nbytes);
  void deallocate(void* ptr, size_t nbytes);
  MemoryStats stats() const;
  void reset_peak();
  // Returns every cached block to the system.
  void empty_cache();
  // The size a request is served with; blocks of one rounded size share a free list.
  static size_t round_size(size_t nbytes);

  struct Impl;

 private:
  CpuAllocator();
  Impl* impl_;
};

}  // namespace titan
