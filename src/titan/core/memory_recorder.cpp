#include "titan/core/memory_recorder.h"

#include <algorithm>
#include <map>
#include <utility>

namespace titan {

namespace {

constexpr MemoryOwner kUntracked{MemoryCategory::untracked, 0};

size_t index_of(MemoryOwner o) {
  return static_cast<size_t>(o.name) * kNumMemoryCategories + static_cast<size_t>(o.category);
}

MemoryOwner owner_at(size_t index) {
  return {static_cast<MemoryCategory>(index % kNumMemoryCategories),
          static_cast<uint32_t>(index / kNumMemoryCategories)};
}

}  // namespace

MemoryRecorder::MemoryRecorder(int64_t allocated_now, size_t max_points)
    : max_points_(std::max<size_t>(max_points, 2)) {
  // How many blocks hold the bytes already live was never seen: their count stays 0.
  Counter& untracked = counter(kUntracked);
  untracked.bytes = untracked.requested = allocated_now;
  by_category_[static_cast<size_t>(MemoryCategory::untracked)] = allocated_now;
  reset_peak();
  timeline_.push_back(point_now());
}

MemoryRecorder::Counter& MemoryRecorder::counter(MemoryOwner o) {
  const size_t i = index_of(o);
  if (i >= counters_.size()) counters_.resize(i + 1);
  return counters_[i];
}

void MemoryRecorder::add(MemoryOwner o, const Block& b, int sign) {
  Counter& c = counter(o);
  c.bytes += sign * b.bytes;
  c.requested += sign * b.requested;
  c.count += sign;
  by_category_[static_cast<size_t>(o.category)] += sign * b.bytes;
}

void MemoryRecorder::on_alloc(const void* p, int64_t bytes, int64_t requested, MemoryOwner owner) {
  const Block b{.bytes = bytes, .requested = requested, .owner = owner};
  live_[p] = b;
  add(owner, b, 1);
  event();
}

void MemoryRecorder::on_free(const void* p, int64_t bytes) {
  auto it = live_.find(p);
  if (it != live_.end()) {
    add(it->second.owner, it->second, -1);
    live_.erase(it);
  } else {
    // Allocated before recording started, so among the untracked bytes; its requested size was
    // never seen either.
    add(kUntracked, Block{.bytes = bytes, .requested = bytes, .owner = kUntracked}, -1);
    counter(kUntracked).count += 1;
  }
  event();
}

void MemoryRecorder::set_owner(const void* p, MemoryOwner owner) {
  auto it = live_.find(p);
  if (it == live_.end()) return;  // allocated before recording: its owner stays unknown
  Block& b = it->second;
  if (index_of(b.owner) == index_of(owner)) return;
  add(b.owner, b, -1);
  b.owner = owner;
  add(owner, b, 1);
  event();
}

TimelinePoint MemoryRecorder::point_now() const {
  return {.event = events_,
          .seconds = std::chrono::duration<double>(Clock::now() - start_).count(),
          .bytes = by_category_};
}

void MemoryRecorder::reset_peak() {
  peak_point_ = point_now();
  peak_ = peak_point_.total();
  peak_counters_ = counters_;
}

void MemoryRecorder::event() {
  ++events_;
  const TimelinePoint p = point_now();
  const int64_t total = p.total();
  if (total > peak_) {
    peak_ = total;
    peak_point_ = p;
    peak_counters_ = counters_;
  }
  if (window_events_ == 0 || total > window_best_.total()) window_best_ = p;
  if (++window_events_ < stride_) return;
  timeline_.push_back(window_best_);
  window_events_ = 0;
  if (timeline_.size() < max_points_) return;
  // Full: merge neighbours, keeping the higher of each pair, so that peaks survive.
  size_t kept = 0;
  for (size_t i = 0; i < timeline_.size(); i += 2) {
    const bool pair = i + 1 < timeline_.size();
    timeline_[kept++] = pair && timeline_[i + 1].total() > timeline_[i].total() ? timeline_[i + 1] : timeline_[i];
  }
  timeline_.resize(kept);
  stride_ *= 2;
}

std::vector<OwnerBytes> MemoryRecorder::by_owner(const std::vector<Counter>& counters) const {
  std::map<std::pair<MemoryCategory, std::string>, OwnerBytes> merged;
  for (size_t i = 0; i < counters.size(); ++i) {
    const Counter& c = counters[i];
    if (c.bytes == 0 && c.count == 0) continue;
    const MemoryOwner o = owner_at(i);
    const std::string name = memory_owner_name(o.name);
    const std::string owner = o.category == MemoryCategory::activations ? memory_layer_of(name) : name;
    OwnerBytes& m = merged[{o.category, owner}];
    m.category = o.category;
    m.owner = owner;
    m.bytes += c.bytes;
    m.requested_bytes += c.requested;
    m.count += c.count;
  }
  std::vector<OwnerBytes> out;
  for (auto& [key, m] : merged) out.push_back(std::move(m));
  std::stable_sort(out.begin(), out.end(), [](const OwnerBytes& a, const OwnerBytes& b) { return a.bytes > b.bytes; });
  return out;
}

MemorySnapshot MemoryRecorder::snapshot(const MemoryStats& stats, size_t num_largest) const {
  MemorySnapshot s;
  s.totals = stats;
  s.recording = true;
  s.events = events_;
  s.seconds = point_now().seconds;
  s.stride = stride_;
  s.max_points = max_points_;
  s.by_category = by_category_;
  s.by_owner = by_owner(counters_);
  s.peak = {.allocated_bytes = peak_,
            .event = peak_point_.event,
            .seconds = peak_point_.seconds,
            .by_category = peak_point_.bytes,
            .by_owner = by_owner(peak_counters_)};

  std::vector<const Block*> blocks;
  blocks.reserve(live_.size());
  for (const auto& [p, b] : live_) blocks.push_back(&b);
  const size_t n = std::min(num_largest, blocks.size());
  std::partial_sort(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n), blocks.end(),
                    [](const Block* a, const Block* b) { return a->bytes > b->bytes; });
  for (size_t i = 0; i < n; ++i)
    s.largest.push_back({.category = blocks[i]->owner.category,
                         .owner = memory_owner_name(blocks[i]->owner.name),
                         .bytes = blocks[i]->bytes,
                         .requested_bytes = blocks[i]->requested});

  s.timeline = timeline_;
  if (window_events_ > 0) s.timeline.push_back(window_best_);
  if (s.timeline.back().event < events_) s.timeline.push_back(point_now());
  return s;
}

}  // namespace titan
