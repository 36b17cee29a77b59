#include "titan/core/trace.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <system_error>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/file_io.h"

namespace titan::trace {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Event {
  std::string name;
  const char* category = "";
  int64_t begin_ns = 0, end_ns = 0;
  std::string args;  // the members of the args object, each preceded by a comma
};

// One thread's recorded events. The recorder keeps it after the thread exits, so that a
// background thread's events are still written; start() forgets those of exited threads.
struct ThreadLog {
  std::mutex mu;
  int tid = 0;
  std::string name;
  std::vector<Event> events;
};

struct Recorder {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadLog>> logs;
  int next_tid = 1;
  // When the recording began: events are timed from here, and spans begun before are dropped.
  std::atomic<int64_t> start_ns{0};
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

struct ThreadState {
  std::shared_ptr<ThreadLog> log;  // made by this thread's first recorded span
  std::string name;
  // The open spans: they end in the reverse order of their beginning, so slots are reused.
  std::vector<Event> open;
  int depth = 0;

  ThreadLog& get_log() {
    if (!log) {
      log = std::make_shared<ThreadLog>();
      Recorder& r = recorder();
      std::lock_guard lock(r.mu);
      log->tid = r.next_tid++;
      log->name = name.empty() ? "thread " + std::to_string(log->tid) : name;
      r.logs.push_back(log);
    }
    return *log;
  }
};

thread_local ThreadState t_state;

void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

void append_key(std::string& out, std::string_view key) {
  out += ",\"";
  append_escaped(out, key);
  out += "\":";
}

// Microseconds with nanosecond digits, as the format's ts and dur want them.
void append_us(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

void append_metadata(std::string& out, const char* what, int pid, int tid, std::string_view name) {
  out += "{\"name\":\"";
  out += what;
  out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":\"";
  append_escaped(out, name);
  out += "\"}},\n";
}

}  // namespace

void start() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mu);
  std::erase_if(r.logs, [](const std::shared_ptr<ThreadLog>& log) { return log.use_count() == 1; });
  for (const auto& log : r.logs) {
    std::lock_guard log_lock(log->mu);
    log->events.clear();
  }
  r.start_ns.store(now_ns());
  detail::recording.store(true);
}

void stop() {
  detail::recording.store(false);
}

void set_thread_name(std::string name) {
  if (t_state.log) {
    std::lock_guard lock(t_state.log->mu);
    t_state.log->name = name;
  }
  t_state.name = std::move(name);
}

void Span::begin(std::string_view name, const char* category) {
  ThreadState& t = t_state;
  if (t.depth == static_cast<int>(t.open.size())) t.open.emplace_back();
  slot_ = t.depth++;
  Event& e = t.open[static_cast<size_t>(slot_)];
  e.name.assign(name);
  e.category = category;
  e.args.clear();
  e.begin_ns = now_ns();
}

void Span::end() {
  ThreadState& t = t_state;
  Event& e = t.open[static_cast<size_t>(slot_)];
  e.end_ns = now_ns();
  t.depth = slot_;
  if (!enabled() || e.begin_ns < recorder().start_ns.load()) return;
  ThreadLog& log = t.get_log();
  std::lock_guard lock(log.mu);
  log.events.push_back(e);
}

Span& Span::rename(std::string_view name) {
  if (active()) t_state.open[static_cast<size_t>(slot_)].name.assign(name);
  return *this;
}

void Span::add_int(std::string_view key, int64_t value) {
  std::string& args = t_state.open[static_cast<size_t>(slot_)].args;
  append_key(args, key);
  args += std::to_string(value);
}

void Span::add_double(std::string_view key, double value) {
  std::string& args = t_state.open[static_cast<size_t>(slot_)].args;
  append_key(args, key);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  args += buf;
}

void Span::add_string(std::string_view key, std::string_view value) {
  std::string& args = t_state.open[static_cast<size_t>(slot_)].args;
  append_key(args, key);
  args += '"';
  append_escaped(args, value);
  args += '"';
}

void Span::add_shapes(std::string_view key, std::span<const Shape> shapes) {
  std::string& args = t_state.open[static_cast<size_t>(slot_)].args;
  append_key(args, key);
  args += '[';
  for (size_t i = 0; i < shapes.size(); ++i) {
    args += i ? ",[" : "[";
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (d) args += ',';
      args += std::to_string(shapes[i][d]);
    }
    args += ']';
  }
  args += ']';
}

std::string to_json(int pid, const std::string& process_name) {
  Recorder& r = recorder();
  const int64_t origin = r.start_ns.load();
  std::string out = "{\"traceEvents\":[\n";
  append_metadata(out, "process_name", pid, 0, process_name);
  out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(pid) + "}},\n";
  std::lock_guard lock(r.mu);
  for (const auto& log : r.logs) {
    std::lock_guard log_lock(log->mu);
    if (log->events.empty()) continue;
    append_metadata(out, "thread_name", pid, log->tid, log->name);
    for (const Event& e : log->events) {
      out += "{\"name\":\"";
      append_escaped(out, e.name);
      out += "\",\"cat\":\"";
      append_escaped(out, e.category);
      out += "\",\"ph\":\"X\",\"ts\":";
      append_us(out, e.begin_ns - origin);
      out += ",\"dur\":";
      append_us(out, e.end_ns - e.begin_ns);
      out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(log->tid) + ",\"args\":{";
      // Each member comes with a leading comma.
      if (!e.args.empty()) out.append(e.args, 1);
      out += "}},\n";
    }
  }
  out.erase(out.size() - 2);  // the last event's ",\n"
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

void write_json(const std::filesystem::path& path, int pid, const std::string& process_name) {
  const std::string text = to_json(pid, process_name);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  TITAN_CHECK(!ec, "trace: cannot create the folder ", path.parent_path().string(), " for trace ",
              path.string(), ": ", ec.message(),
              "; make it writable or point profiling.save_traces_folder elsewhere");
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    OutFile f(tmp);
    f.write(text.data(), text.size());
    f.sync();
    f.close();
  }
  std::filesystem::rename(tmp, path, ec);
  TITAN_CHECK(!ec, "trace: cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
}

}  // namespace titan::trace
