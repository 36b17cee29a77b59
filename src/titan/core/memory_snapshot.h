#pragma once
// What CpuAllocator::memory_snapshot() returns while it records, and its JSON file: the
// allocator's counters, the live bytes by owner now and at the peak, the largest live blocks,
// and a timeline of allocated bytes per category. scripts/memviz.py draws the file.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/allocator.h"
#include "titan/core/memory_owner.h"

namespace titan {

using CategoryBytes = std::array<int64_t, kNumMemoryCategories>;  // indexed by MemoryCategory

struct OwnerBytes {
  MemoryCategory category = MemoryCategory::other;
  std::string owner;            // activations: the layer (memory_layer_of the module path)
  int64_t bytes = 0;            // as the allocator counts them: rounded block sizes
  int64_t requested_bytes = 0;  // what the tensors asked for
  int64_t count = 0;            // live blocks
};

struct LiveBlock {
  MemoryCategory category = MemoryCategory::other;
  std::string owner;  // the full module path for activations
  int64_t bytes = 0;
  int64_t requested_bytes = 0;
};

struct TimelinePoint {
  uint64_t event = 0;    // allocations, frees and re-ownings since recording started
  double seconds = 0;    // since recording started
  CategoryBytes bytes = {};
  int64_t total() const;
};

struct MemorySnapshot {
  // Filled by whoever writes the file: why and when it was taken.
  std::string reason;  // "step", "oom", ...
  int64_t step = -1;
  int rank = 0;

  MemoryStats totals;  // CpuAllocator::stats() at the same instant
  bool recording = false;
  uint64_t events = 0;
  double seconds = 0;
  // The timeline keeps at most max_points points: when full, neighbouring points are merged
  // pairwise keeping the larger total, and each point then stands for twice as many events
  // (`stride`). Peaks survive the merging; dips between them may not.
  uint64_t stride = 1;
  size_t max_points = 0;
  CategoryBytes by_category = {};
  std::vector<OwnerBytes> by_owner;  // largest first; sums to totals.allocated_bytes
  // The highest allocated_bytes since recording started or the allocator's last reset_peak.
  struct Peak {
    int64_t allocated_bytes = 0;
    uint64_t event = 0;
    double seconds = 0;
    CategoryBytes by_category = {};
    std::vector<OwnerBytes> by_owner;
  } peak;
  std::vector<LiveBlock> largest;  // largest first
  std::vector<TimelinePoint> timeline;
};

// The layer a module path belongs to: up to its first list index ("layers.3.attention.wq" ->
// "layers.3"), else its first name ("output"); the root module's "" stays "".
std::string memory_layer_of(std::string_view module_path);

std::string memory_snapshot_json(const MemorySnapshot& s);
// Writes the JSON to a temporary file beside `path`, then renames it there, creating the
// folders on the way: a reader never sees half a snapshot.
void write_memory_snapshot(const MemorySnapshot& s, const std::filesystem::path& path);

}  // namespace titan
