#pragma once
// A caching allocator for host memory. Training allocates the same activation sizes every step;
// keeping freed blocks in per-size free lists turns those into list pops instead of page faults.
// Every block is 64-byte aligned (one cache line, one AVX-512 vector).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "titan/core/error.h"
#include "titan/core/memory_owner.h"

namespace titan {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors now
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes since the last reset
  int64_t reserved_bytes = 0;        // allocated + cached in free lists
  int64_t num_allocs = 0;            // requests served
  int64_t num_cache_hits = 0;        // of those, served from a free list
};

struct MemorySnapshot;  // memory_snapshot.h

// An allocation the allocator could not serve. Carries the snapshot taken at the failure when
// the allocator was recording, before unwinding frees what the failing step held.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& what, std::shared_ptr<const MemorySnapshot> snapshot)
      : Error(what), snapshot_(std::move(snapshot)) {}
  const std::shared_ptr<const MemorySnapshot>& snapshot() const { return snapshot_; }

 private:
  std::shared_ptr<const MemorySnapshot> snapshot_;
};

class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  // The process-wide instance. Caching is on unless TITAN_ALLOCATOR_CACHING=0 (the sanitizer
  // build sets it, so use-after-free is caught instead of hidden by reuse).
  static CpuAllocator& instance();

  // Throws OutOfMemoryError naming the request and the allocated and reserved totals.
  void* allocate(size_t nbytes);
  void deallocate(void* ptr, size_t nbytes);
  MemoryStats stats() const;
  void reset_peak();
  // Returns every cached block to the system.
  void empty_cache();
  // The size a request is served with; blocks of one rounded size share a free list.
  static size_t round_size(size_t nbytes);

  // ---- memory snapshots (core/memory_snapshot.h) ----------------------------------------------
  // While recording, every allocation is kept with its size and owner (the allocating thread's
  // MemoryOwnerScope), with a timeline of at most `max_points` points; what is live when it
  // starts counts as untracked. Off, the cost is a null-pointer test under the lock that every
  // allocation takes anyway. Starting again starts afresh.
  void start_recording(size_t max_points = 4096);
  void stop_recording();
  bool recording() const;
  // The block at `ptr` (as allocate returned it) now belongs to `owner`; nothing when not
  // recording or when the block predates recording.
  void set_owner(const void* ptr, MemoryOwner owner);
  // The totals, and while recording everything else MemorySnapshot holds, at one instant.
  MemorySnapshot memory_snapshot(size_t num_largest = 20) const;

  struct Impl;

 private:
  CpuAllocator();
  Impl* impl_;
};

}  // namespace titan
