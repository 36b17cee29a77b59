#include "titan/core/memory_snapshot.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/core/file_io.h"

namespace titan {

namespace {

using nlohmann::json;

json categories_json(const CategoryBytes& b) {
  json out = json::object();
  for (MemoryCategory c : memory_categories()) out[memory_category_name(c)] = b[static_cast<size_t>(c)];
  return out;
}

json owners_json(const std::vector<OwnerBytes>& owners) {
  json out = json::array();
  for (const OwnerBytes& o : owners)
    out.push_back({{"category", memory_category_name(o.category)},
                   {"owner", o.owner},
                   {"bytes", o.bytes},
                   {"requested_bytes", o.requested_bytes},
                   {"count", o.count}});
  return out;
}

}  // namespace

int64_t TimelinePoint::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

std::string memory_layer_of(std::string_view path) {
  for (size_t start = 0; start < path.size();) {
    const size_t end = std::min(path.find('.', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos)
      return std::string(path.substr(0, end));
    start = end + 1;
  }
  return std::string(path.substr(0, path.find('.')));
}

std::string memory_snapshot_json(const MemorySnapshot& s) {
  json categories = json::array();
  for (MemoryCategory c : memory_categories()) categories.push_back(memory_category_name(c));
  json largest = json::array();
  for (const LiveBlock& b : s.largest)
    largest.push_back({{"category", memory_category_name(b.category)},
                       {"owner", b.owner},
                       {"bytes", b.bytes},
                       {"requested_bytes", b.requested_bytes}});
  // Columns rather than one object per point: a timeline of thousands of points stays small.
  json events = json::array(), seconds = json::array(), bytes = json::object();
  for (MemoryCategory c : memory_categories()) bytes[memory_category_name(c)] = json::array();
  for (const TimelinePoint& p : s.timeline) {
    events.push_back(p.event);
    seconds.push_back(p.seconds);
    for (MemoryCategory c : memory_categories())
      bytes[memory_category_name(c)].push_back(p.bytes[static_cast<size_t>(c)]);
  }
  json out = {
      {"format", "titan memory snapshot"},
      {"version", 1},
      {"reason", s.reason},
      {"step", s.step},
      {"rank", s.rank},
      {"totals",
       {{"allocated_bytes", s.totals.allocated_bytes},
        {"peak_allocated_bytes", s.totals.peak_allocated_bytes},
        {"reserved_bytes", s.totals.reserved_bytes},
        {"num_allocs", s.totals.num_allocs},
        {"num_cache_hits", s.totals.num_cache_hits}}},
      {"recording",
       {{"on", s.recording},
        {"events", s.events},
        {"seconds", s.seconds},
        {"timeline_stride", s.stride},
        {"timeline_max_points", s.max_points}}},
      {"categories", categories},
      {"by_category", categories_json(s.by_category)},
      {"by_owner", owners_json(s.by_owner)},
      {"peak",
       {{"allocated_bytes", s.peak.allocated_bytes},
        {"event", s.peak.event},
        {"seconds", s.peak.seconds},
        {"by_category", categories_json(s.peak.by_category)},
        {"by_owner", owners_json(s.peak.by_owner)}}},
      {"largest", largest},
      {"timeline", {{"event", events}, {"seconds", seconds}, {"bytes", bytes}}},
  };
  return out.dump(1);
}

void write_memory_snapshot(const MemorySnapshot& s, const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const std::string text = memory_snapshot_json(s);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  OutFile f(tmp);
  f.write(text.data(), text.size());
  f.close();
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp);
  TITAN_CHECK(!ec, "cannot move the memory snapshot ", tmp.string(), " to ", path.string(), ": ",
              ec.message());
}

}  // namespace titan
