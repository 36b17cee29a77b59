#pragma once
// The allocator's record of live blocks and their owners while it records (CpuAllocator::
// start_recording). Not thread-safe: the allocator calls it under its own lock, which it holds
// for every allocation anyway, so recording adds no synchronisation.
#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "titan/core/memory_snapshot.h"

namespace titan {

class MemoryRecorder {
 public:
  // `allocated_now`: bytes already live, whose owners were never seen (category untracked).
  MemoryRecorder(int64_t allocated_now, size_t max_points);

  void on_alloc(const void* p, int64_t bytes, int64_t requested, MemoryOwner owner);
  void on_free(const void* p, int64_t bytes);
  // A block changes hands (a gradient that autograd made as a temporary and kept as .grad).
  void set_owner(const void* p, MemoryOwner owner);
  void reset_peak();

  MemorySnapshot snapshot(const MemoryStats& stats, size_t num_largest) const;

 private:
  struct Block {
    int64_t bytes = 0;
    int64_t requested = 0;
    MemoryOwner owner;
  };
  struct Counter {
    int64_t bytes = 0;
    int64_t requested = 0;
    int64_t count = 0;
  };

  Counter& counter(MemoryOwner o);
  void add(MemoryOwner o, const Block& b, int sign);
  void event();
  TimelinePoint point_now() const;
  std::vector<OwnerBytes> by_owner(const std::vector<Counter>& counters) const;

  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
  size_t max_points_;
  std::unordered_map<const void*, Block> live_;
  // Indexed by owner name * kNumMemoryCategories + category: dense, as names are interned.
  std::vector<Counter> counters_;
  // Sums to the allocator's allocated_bytes after every event.
  CategoryBytes by_category_ = {};
  uint64_t events_ = 0;

  std::vector<TimelinePoint> timeline_;
  uint64_t stride_ = 1;
  // The highest point of the events since the last one kept, kept when `stride_` have passed.
  TimelinePoint window_best_;
  uint64_t window_events_ = 0;

  int64_t peak_ = 0;
  TimelinePoint peak_point_;
  std::vector<Counter> peak_counters_;
};

}  // namespace titan
