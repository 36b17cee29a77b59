#pragma once
// A process-wide recorder of timed spans, written in Chrome's trace event format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. Every layer may open spans: off, a span costs one
// relaxed atomic load and a branch at each end, so they stay in the hot paths for good; on, a
// clock read at each end and an append to a buffer of the recording thread.
//
//   trace::Span span("gemm", "gemm");
//   span.arg("M", m).arg("flops", 2 * m * n * k);
//
// A span is recorded when it ends, if recording is on then and was on when it began; so each
// thread's spans nest, and a span that straddles start() or stop() is left out whole. A span
// ends on the thread that began it (it lives on that thread's stack); its category is a string
// literal.
#include <atomic>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "titan/core/shape.h"

namespace titan::trace {

namespace detail {
inline std::atomic<bool> recording{false};
}

inline bool enabled() noexcept {
  return detail::recording.load(std::memory_order_relaxed);
}

// Starts recording, dropping every event an earlier recording left.
void start();
// Stops recording; the events recorded stay for to_json until the next start().
void stop();

// Names the calling thread in traces; unnamed threads are "thread <tid>".
void set_thread_name(std::string name);

// Every event recorded by every thread between start() and stop(), as a Chrome trace JSON
// document: complete events ("ph": "X", microseconds from start()) and process and thread name
// metadata. `pid` identifies this process in the trace (the rank), named `process_name`.
std::string to_json(int pid, const std::string& process_name);

// Writes to_json to `path` atomically (a temporary file, fsync'ed, renamed over it), creating
// its folder; errors name the path.
void write_json(const std::filesystem::path& path, int pid, const std::string& process_name);

class Span {
 public:
  Span(const char* name, const char* category) {
    if (enabled()) begin(name, category);
  }
  Span(const std::string& name, const char* category) {
    if (enabled()) begin(name, category);
  }
  ~Span() {
    if (slot_ >= 0) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  // Whether this span is being recorded: arguments that cost something to compute are worth
  // computing only then.
  bool active() const { return slot_ >= 0; }

  // Named now, for a name that costs something to make (the name of an autograd node).
  Span& rename(std::string_view name);

  template <std::integral I>
  Span& arg(std::string_view key, I value) {
    if (active()) add_int(key, static_cast<int64_t>(value));
    return *this;
  }
  template <std::floating_point F>
  Span& arg(std::string_view key, F value) {
    if (active()) add_double(key, static_cast<double>(value));
    return *this;
  }
  Span& arg(std::string_view key, std::string_view value) {
    if (active()) add_string(key, value);
    return *this;
  }
  Span& arg(std::string_view key, const char* value) { return arg(key, std::string_view(value)); }
  // A list of shapes, e.g. an op's inputs: [[4, 32], [32]].
  Span& arg(std::string_view key, std::span<const Shape> shapes) {
    if (active()) add_shapes(key, shapes);
    return *this;
  }

 private:
  void begin(std::string_view name, const char* category);
  void end();
  void add_int(std::string_view key, int64_t value);
  void add_double(std::string_view key, double value);
  void add_string(std::string_view key, std::string_view value);
  void add_shapes(std::string_view key, std::span<const Shape> shapes);

  // Its place on the recording thread's stack of open spans; -1: not recorded.
  int slot_ = -1;
};

}  // namespace titan::trace
