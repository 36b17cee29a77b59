#include "titan/core/allocator.h"

#include <bit>
#include <cstdlib>
#include <iomanip>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/memory_recorder.h"

namespace titan {

struct CpuAllocator::Impl {
  mutable std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  MemoryStats stats;
  bool caching = true;
  std::unique_ptr<MemoryRecorder> recorder;  // set while recording
};

namespace {

// Larger than the memory of any host this runs on. Refused before malloc, as sanitizer
// allocators abort on such sizes instead of returning null.
constexpr size_t kMaxRequest = size_t{1} << 47;

std::string gib(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << static_cast<double>(bytes) / double(1 << 30) << " GiB";
  return os.str();
}

MemorySnapshot snapshot_locked(const CpuAllocator::Impl& impl, size_t num_largest) {
  if (impl.recorder) return impl.recorder->snapshot(impl.stats, num_largest);
  MemorySnapshot s;
  s.totals = impl.stats;
  return s;
}

[[noreturn]] void out_of_memory(const CpuAllocator::Impl& impl, size_t nbytes) {
  const MemoryStats& s = impl.stats;
  std::ostringstream os;
  os << "CpuAllocator: out of memory: cannot allocate " << nbytes << " bytes (" << gib(static_cast<int64_t>(nbytes))
     << "); " << s.allocated_bytes << " bytes (" << gib(s.allocated_bytes) << ") are allocated to tensors and "
     << s.reserved_bytes << " bytes (" << gib(s.reserved_bytes)
     << ") reserved from the system. Reduce training.local_batch_size or training.seq_len, or turn on "
        "activation checkpointing (activation_checkpoint.mode)";
  std::shared_ptr<const MemorySnapshot> snapshot;
  if (impl.recorder) {
    try {
      snapshot = std::make_shared<const MemorySnapshot>(snapshot_locked(impl, 20));
    } catch (const std::bad_alloc&) {  // too little memory left even for the snapshot
    }
  }
  throw OutOfMemoryError(os.str(), std::move(snapshot));
}

}  // namespace

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
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (nbytes > kMaxRequest) out_of_memory(*impl_, nbytes);
  const size_t size = round_size(nbytes);
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
    if (!p) out_of_memory(*impl_, nbytes);
    s.reserved_bytes += static_cast<int64_t>(size);
  }
  s.allocated_bytes += static_cast<int64_t>(size);
  if (s.allocated_bytes > s.peak_allocated_bytes) s.peak_allocated_bytes = s.allocated_bytes;
  if (impl_->recorder) [[unlikely]]
    impl_->recorder->on_alloc(p, static_cast<int64_t>(size), static_cast<int64_t>(nbytes),
                              current_memory_owner());
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.allocated_bytes -= static_cast<int64_t>(size);
  if (impl_->recorder) [[unlikely]]
    impl_->recorder->on_free(ptr, static_cast<int64_t>(size));
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
  if (impl_->recorder) impl_->recorder->reset_peak();
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [sz, list] : impl_->free_lists) {
    for (void* q : list) std::free(q);
    impl_->stats.reserved_bytes -= static_cast<int64_t>(sz * list.size());
  }
  impl_->free_lists.clear();
}

void CpuAllocator::start_recording(size_t max_points) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->recorder = std::make_unique<MemoryRecorder>(impl_->stats.allocated_bytes, max_points);
}

void CpuAllocator::stop_recording() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->recorder.reset();
}

bool CpuAllocator::recording() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->recorder != nullptr;
}

void CpuAllocator::set_owner(const void* ptr, MemoryOwner owner) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->recorder) impl_->recorder->set_owner(ptr, owner);
}

MemorySnapshot CpuAllocator::memory_snapshot(size_t num_largest) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return snapshot_locked(*impl_, num_largest);
}

}  // namespace titan
