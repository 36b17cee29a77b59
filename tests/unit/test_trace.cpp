// The trace recorder: what it records, when, from which threads, and the Chrome trace JSON it
// writes (parsed back with nlohmann::json, as Perfetto would read it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "titan/core/trace.h"

namespace titan::trace {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json parsed(int pid = 0) {
  return json::parse(to_json(pid, "rank " + std::to_string(pid)));
}

// The complete ("X") events of a trace.
std::vector<json> spans(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}

TEST(Trace, OffRecordsNothing) {
  stop();
  {
    Span s("while off", "test");
    EXPECT_FALSE(s.active());
    s.arg("n", 1);
  }
  start();
  stop();
  {
    Span s("after stop", "test");
    EXPECT_FALSE(s.active());
  }
  EXPECT_TRUE(spans(parsed()).empty());
}

TEST(Trace, SpansNestAndCarryTheirArgs) {
  start();
  {
    Span outer("outer", "test");
    outer.arg("flops", int64_t{1} << 40).arg("ratio", 0.5).arg("what", "a \"quoted\"\nline");
    {
      Span inner("inner", "test");
      inner.arg("inputs", std::vector<Shape>{{4, 32}, {}, {32}});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  stop();
  std::vector<json> events = spans(parsed());
  ASSERT_EQ(events.size(), 2u);
  // Recorded as they end: the inner one first.
  const json& inner = events[0];
  const json& outer = events[1];
  EXPECT_EQ(inner.at("name"), "inner");
  EXPECT_EQ(outer.at("name"), "outer");
  EXPECT_EQ(inner.at("tid"), outer.at("tid"));
  EXPECT_GE(inner.at("dur").get<double>(), 1000.0) << "microseconds";
  EXPECT_LE(outer.at("ts").get<double>(), inner.at("ts").get<double>());
  EXPECT_GE(outer.at("ts").get<double>() + outer.at("dur").get<double>(),
            inner.at("ts").get<double>() + inner.at("dur").get<double>());
  EXPECT_EQ(outer.at("args").at("flops").get<int64_t>(), int64_t{1} << 40);
  EXPECT_DOUBLE_EQ(outer.at("args").at("ratio").get<double>(), 0.5);
  EXPECT_EQ(outer.at("args").at("what"), "a \"quoted\"\nline");
  EXPECT_EQ(inner.at("args").at("inputs"), json::parse("[[4,32],[],[32]]"));
}

TEST(Trace, JsonHasTheChromeTraceFields) {
  start();
  {
    Span s("gemm", "kernel");
    s.rename("sgemm").arg("M", 2);
  }
  stop();
  json trace = parsed(3);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  std::map<std::string, json> metadata;
  for (const json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("ph") == "M") metadata[e.at("name")] = e;
  }
  EXPECT_EQ(metadata.at("process_name").at("args").at("name"), "rank 3");
  ASSERT_TRUE(metadata.contains("thread_name"));
  std::vector<json> events = spans(trace);
  ASSERT_EQ(events.size(), 1u);
  const json& e = events[0];
  for (const char* field : {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"})
    EXPECT_TRUE(e.contains(field)) << field;
  EXPECT_EQ(e.at("name"), "sgemm");
  EXPECT_EQ(e.at("cat"), "kernel");
  EXPECT_GE(e.at("ts").get<double>(), 0.0);
  EXPECT_GE(e.at("dur").get<double>(), 0.0);
  EXPECT_EQ(e.at("tid"), metadata.at("thread_name").at("tid"));
}

// A span open across start() began before the recording: it is dropped, not cut.
TEST(Trace, SpanOpenAcrossStartIsDropped) {
  stop();
  start();
  {
    Span straddling("straddling", "test");
    ASSERT_TRUE(straddling.active());
    start();
    Span inside("inside", "test");
  }
  stop();
  std::vector<json> events = spans(parsed());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "inside");
}

TEST(Trace, ThreadsRecordSideBySideEachUnderItsOwnTid) {
  constexpr int kThreads = 4, kSpans = 200;
  start();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      set_thread_name("worker " + std::to_string(t));
      for (int i = 0; i < kSpans; ++i) {
        Span s("work", "test");
        s.arg("thread", t).arg("i", i);
      }
    });
  for (std::thread& t : threads) t.join();
  stop();
  // The threads have exited; their events stay until the next start().
  json trace = parsed();
  std::map<int, std::string> thread_names;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names[e.at("tid")] = e.at("args").at("name");
  std::map<int, std::set<int>> seen;  // tid -> the i of each of its spans
  std::map<int, int> thread_of_tid;
  for (const json& e : spans(trace)) {
    const int tid = e.at("tid"), t = e.at("args").at("thread");
    seen[tid].insert(e.at("args").at("i").get<int>());
    ASSERT_TRUE(!thread_of_tid.contains(tid) || thread_of_tid[tid] == t) << "tid " << tid << " mixes threads";
    thread_of_tid[tid] = t;
    EXPECT_EQ(thread_names.at(tid), "worker " + std::to_string(t));
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads));
  for (const auto& [tid, is] : seen) EXPECT_EQ(is.size(), static_cast<size_t>(kSpans)) << "tid " << tid;
  start();
  stop();
  EXPECT_TRUE(spans(parsed()).empty());
}

TEST(Trace, WritesAtomicallyAndNamesThePathOnFailure) {
  const fs::path dir = test::fresh_temp_dir("trace_write");
  start();
  { Span s("written", "test"); }
  stop();
  const fs::path path = dir / "iteration_2" / "rank0_trace.json";
  write_json(path, 0, "rank 0");
  std::vector<json> events = spans(json::parse(test::slurp(path)));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "written");
  EXPECT_EQ(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator()), 1)
      << "no temporary file is left";

  std::ofstream(dir / "a_file") << "not a folder";
  const fs::path blocked = dir / "a_file" / "rank0_trace.json";
  EXPECT_TITAN_ERROR(write_json(blocked, 0, "rank 0"), blocked.string());
}

}  // namespace
}  // namespace titan::trace
