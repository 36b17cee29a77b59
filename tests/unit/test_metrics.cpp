#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/blas_kernels.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/metrics/peak_flops.h"
#include "titan/train/proto/tensorboard_event.pb.h"
#include "titan/train/metrics/tensorboard.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using train::LoggedMetrics;
using train::MetricsLogger;
using train::MetricsOptions;
using train::StepMetrics;

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("titan_" + std::string(info->test_suite_name()) + "_" +
                                         info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
T load_le(const std::string& s, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file, checking both CRCs of every record.
std::vector<std::string> read_records(const fs::path& p) {
  std::string bytes = read_bytes(p);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size()) << "truncated record header at byte " << at;
    if (at + 12 > bytes.size()) break;
    auto len = load_le<uint64_t>(bytes, at);
    EXPECT_EQ(load_le<uint32_t>(bytes, at + 8), train::masked_crc32c(bytes.substr(at, 8)));
    EXPECT_LE(at + 12 + len + 4, bytes.size()) << "truncated record at byte " << at;
    if (at + 12 + len + 4 > bytes.size()) break;
    std::string data = bytes.substr(at + 12, len);
    EXPECT_EQ(load_le<uint32_t>(bytes, at + 12 + len), train::masked_crc32c(data));
    records.push_back(data);
    at += 12 + len + 4;
  }
  return records;
}

MetricsOptions options(const fs::path& dump, int64_t log_freq, int64_t total_steps) {
  return {.dump_folder = dump, .log_freq = log_freq, .total_steps = total_steps, .peak_flops = 1e11};
}

StepMetrics step(int64_t s, int64_t tokens, double seconds) {
  return {.step = s,
          .loss = 10.0 / static_cast<double>(s),
          .grad_norm = 0.5 * static_cast<double>(s),
          .lr = 3e-4,
          .tokens = tokens,
          .step_seconds = seconds,
          .flops_per_token = 6e6};
}

// ---- CRC32C and TFRecord framing ----------------------------------------------------------------

TEST(Tensorboard, Crc32cTestVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Tensorboard, MaskedCrcRotatesAndOffsets) {
  uint32_t c = 0xE3069283u;
  EXPECT_EQ(train::masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(Tensorboard, RecordFraming) {
  std::string r = train::tfrecord("abc");
  ASSERT_EQ(r.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(load_le<uint64_t>(r, 0), 3u);
  EXPECT_EQ(load_le<uint32_t>(r, 8), train::masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(load_le<uint32_t>(r, 15), train::masked_crc32c("abc"));
}

TEST(Tensorboard, EventFileHoldsVersionThenScalars) {
  TempDir dir;
  fs::path file;
  {
    train::EventFileWriter w(dir.path() / "tb");
    file = w.path();
    w.add_scalars(7, {{"loss", 2.5}, {"lr", 1e-3}});
  }
  EXPECT_EQ(file.parent_path(), dir.path() / "tb");
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u) << file;
  std::vector<std::string> records = read_records(file);
  ASSERT_EQ(records.size(), 2u);
  tensorboard::Event first, second;
  ASSERT_TRUE(first.ParseFromString(records[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_GT(first.wall_time(), 1.6e9);
  ASSERT_TRUE(second.ParseFromString(records[1]));
  EXPECT_EQ(second.step(), 7);
  ASSERT_TRUE(second.has_summary());
  ASSERT_EQ(second.summary().value_size(), 2);
  EXPECT_EQ(second.summary().value(0).tag(), "loss");
  EXPECT_EQ(second.summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(second.summary().value(1).tag(), "lr");
  EXPECT_EQ(second.summary().value(1).simple_value(), 1e-3f);
}

// TensorBoard's own reader (PyPI tensorboard in the venv) must see what the logger wrote.
TEST(Tensorboard, ReadByTensorboardItself) {
  TempDir dir;
  MetricsOptions o = options(dir.path(), 2, 4);
  o.enable_tensorboard = true;
  std::ostringstream console;
  std::vector<LoggedMetrics> logged;
  {
    MetricsLogger logger(o, console);
    for (int64_t s = 1; s <= 4; ++s) {
      StepMetrics m = step(s, 1000, 0.5);
      m.extra = {{"moe/load_max", 1.0 + 0.25 * static_cast<double>(s)}};
      if (auto out = logger.record(m)) logged.push_back(*out);
    }
    EXPECT_EQ(logger.tensorboard_path().parent_path(), dir.path() / "tb");
  }
  ASSERT_EQ(logged.size(), 3u);  // steps 1, 2, 4

  std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                    "/tests/metrics/read_tensorboard.py' '" + (dir.path() / "tb").string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << cmd;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  int status = pclose(pipe);
  // stderr is left to the terminal: a warning from TensorBoard must not corrupt the JSON.
  ASSERT_EQ(status, 0) << cmd << "\n"
                       << out << "\n(is tensorboard installed in the venv? run make deps-test)";
  nlohmann::json j = nlohmann::json::parse(out);

  for (const char* tag :
       {"loss", "grad_norm", "lr", "tps", "tflops", "mfu_pct", "memory_peak_gib", "moe/load_max"}) {
    ASSERT_TRUE(j.contains(tag)) << "TensorBoard lacks tag " << tag << ": " << out;
    ASSERT_EQ(j[tag].size(), logged.size()) << tag;
  }
  for (size_t i = 0; i < logged.size(); ++i) {
    const LoggedMetrics& m = logged[i];
    auto value = [&](const char* tag) {
      EXPECT_EQ(j[tag][i][0].get<int64_t>(), m.step) << tag;
      return j[tag][i][1].get<double>();
    };
    EXPECT_FLOAT_EQ(value("loss"), static_cast<float>(m.loss));
    EXPECT_FLOAT_EQ(value("grad_norm"), static_cast<float>(m.grad_norm));
    EXPECT_FLOAT_EQ(value("lr"), static_cast<float>(m.lr));
    EXPECT_FLOAT_EQ(value("tps"), static_cast<float>(m.tokens_per_second));
    EXPECT_FLOAT_EQ(value("tflops"), static_cast<float>(m.tflops));
    EXPECT_FLOAT_EQ(value("mfu_pct"), static_cast<float>(m.mfu_percent));
    EXPECT_FLOAT_EQ(value("memory_peak_gib"), static_cast<float>(m.peak_memory_bytes / 1073741824.0));
    EXPECT_FLOAT_EQ(value("moe/load_max"), static_cast<float>(m.extra.at(0).second));
  }
}

// ---- MetricsLogger ------------------------------------------------------------------------------

TEST(Metrics, LogsFirstEveryLogFreqAndLastStep) {
  TempDir dir;
  std::ostringstream console;
  MetricsLogger logger(options(dir.path(), 3, 10), console);
  std::vector<int64_t> logged;
  for (int64_t s = 1; s <= 10; ++s)
    if (logger.record(step(s, 100, 0.1))) logged.push_back(s);
  EXPECT_EQ(logged, (std::vector<int64_t>{1, 3, 6, 9, 10}));
  EXPECT_EQ(read_lines(logger.jsonl_path()).size(), 5u);
  EXPECT_TRUE(logger.tensorboard_path().empty());
  EXPECT_FALSE(fs::exists(dir.path() / "tb"));
}

TEST(Metrics, DisabledSinksWriteNothing) {
  TempDir dir;
  std::ostringstream console;
  MetricsOptions o = options(dir.path() / "run", 1, 2);
  o.enable_jsonl = false;
  MetricsLogger logger(o, console);
  EXPECT_TRUE(logger.record(step(1, 100, 0.1)));
  EXPECT_TRUE(logger.jsonl_path().empty());
  EXPECT_TRUE(fs::is_empty(dir.path() / "run"));
  EXPECT_NE(console.str().find("step 1/2"), std::string::npos) << console.str();
}

TEST(Metrics, ThroughputAveragesTheWindowAndEtaUsesItsMeanStep) {
  TempDir dir;
  std::ostringstream console;
  MetricsLogger logger(options(dir.path(), 3, 10), console);
  auto first = logger.record(step(1, 1000, 0.5));
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(first->tokens_per_second, 2000);
  EXPECT_DOUBLE_EQ(first->eta_seconds, 0.5 * 9);

  EXPECT_FALSE(logger.record(step(2, 1000, 0.25)));
  auto third = logger.record(step(3, 2000, 0.5));
  ASSERT_TRUE(third);
  // Window = steps 2..3: 3000 tokens in 0.75 s; 6e6 FLOP per token against a 1e11 FLOP/s peak.
  EXPECT_DOUBLE_EQ(third->tokens_per_second, 4000);
  EXPECT_DOUBLE_EQ(third->tflops, 4000 * 6e6 / 1e12);
  EXPECT_DOUBLE_EQ(third->mfu_percent, 100 * 4000 * 6e6 / 1e11);
  EXPECT_DOUBLE_EQ(third->mean_step_seconds, 0.375);
  EXPECT_DOUBLE_EQ(third->eta_seconds, 0.375 * 7);
  EXPECT_DOUBLE_EQ(third->loss, 10.0 / 3);  // the step's own, not the window's
  EXPECT_DOUBLE_EQ(third->grad_norm, 1.5);
}

// Graph mode on a device that counts its memory logs the device's peak; where it answers nothing
// (the CPU plugins), the host allocator's.
TEST(Metrics, DevicePeakReplacesTheHostPeakWhereReported) {
  TempDir dir;
  std::ostringstream console;
  MetricsOptions o = options(dir.path(), 1, 3);
  std::optional<int64_t> device = int64_t{3} << 30;
  o.device_peak_bytes = [&] { return device; };
  MetricsLogger logger(o, console);
  auto first = logger.record(step(1, 100, 0.1));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->peak_memory_bytes, int64_t{3} << 30);
  EXPECT_NE(console.str().find("mem 3.00 GiB"), std::string::npos) << console.str();
  device.reset();
  auto second = logger.record(step(2, 100, 0.1));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->peak_memory_bytes, CpuAllocator::instance().stats().peak_allocated_bytes);
}

TEST(Metrics, ConsoleLineNamesEveryFigure) {
  TempDir dir;
  std::ostringstream console;
  Tensor keep = Tensor::zeros({1024 * 1024});  // 4 MiB, so the allocator's peak is at least that
  MetricsLogger logger(options(dir.path(), 5, 100), console);
  StepMetrics m = step(1, 4000, 2.0);
  m.extra = {{"moe/load_max", 1.25}};
  ASSERT_TRUE(logger.record(m));
  std::string line = console.str();
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  for (const char* part :
       {"step   1/100", "loss 10.0000", "grad_norm 0.5000", "lr 3.000e-04", "tps 2000", "tflops 0.012",
        "mfu 12.00%", "mem ", " MiB", "eta 0:03:18", "moe/load_max 1.25"}) {
    EXPECT_NE(line.find(part), std::string::npos) << "console line lacks '" << part << "': " << line;
  }
}

// Coloured as TorchTitan colours it, with the same text once the escapes are taken out; plain
// when asked, whatever the console.
TEST(Metrics, ConsoleLineIsColouredOnlyWhereAllowed) {
  LoggedMetrics m{.step = 3, .loss = 2.5, .tokens_per_second = 100, .tflops = 0.5, .mfu_percent = 7};
  const std::string plain = train::format_metrics_line(m, 10);
  const std::string colored = train::format_metrics_line(m, 10, true);
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  for (const char* code :
       {"\033[31mstep", "\033[32mloss", "\033[34mtps", "\033[36mtflops", "\033[35mmfu", "\033[33mmem"})
    EXPECT_NE(colored.find(code), std::string::npos) << code;
  std::string stripped;
  for (size_t i = 0; i < colored.size(); ++i) {
    if (colored[i] == '\033')
      i = colored.find('m', i);
    else
      stripped += colored[i];
  }
  EXPECT_EQ(stripped, plain);

  unsetenv("NO_COLOR");
  unsetenv("FORCE_COLOR");
  EXPECT_TRUE(train::use_color(false, true));
  EXPECT_FALSE(train::use_color(false, false));
  EXPECT_FALSE(train::use_color(true, true)) << "metrics.disable_color_printing wins";
  setenv("FORCE_COLOR", "1", 1);
  EXPECT_TRUE(train::use_color(false, false));
  EXPECT_FALSE(train::use_color(true, false));
  setenv("NO_COLOR", "1", 1);
  EXPECT_FALSE(train::use_color(false, true));
  unsetenv("NO_COLOR");
  unsetenv("FORCE_COLOR");
}

TEST(Metrics, JsonlLinesParseAndHoldTheLoggedValues) {
  TempDir dir;
  Tensor keep = Tensor::zeros({1024});
  std::ostringstream console;
  std::vector<LoggedMetrics> logged;
  {
    MetricsLogger logger(options(dir.path() / "new" / "run", 2, 4), console);
    for (int64_t s = 1; s <= 4; ++s) {
      StepMetrics m = step(s, 500, 0.25);
      if (s == 4) m.loss = std::numeric_limits<double>::quiet_NaN();
      m.extra = {{"moe/imbalance", 0.1 * static_cast<double>(s)}};
      if (auto out = logger.record(m)) logged.push_back(*out);
    }
  }
  int64_t peak_now = CpuAllocator::instance().stats().peak_allocated_bytes;
  std::vector<std::string> lines = read_lines(dir.path() / "new" / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), logged.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j = nlohmann::json::parse(lines[i]);
    const LoggedMetrics& m = logged[i];
    EXPECT_EQ(j.at("step").get<int64_t>(), m.step);
    EXPECT_GT(j.at("wall_time").get<double>(), 1.6e9);
    if (std::isnan(m.loss)) {
      EXPECT_TRUE(j.at("loss").is_null()) << lines[i];
    } else {
      EXPECT_DOUBLE_EQ(j.at("loss").get<double>(), m.loss);
    }
    EXPECT_DOUBLE_EQ(j.at("grad_norm").get<double>(), m.grad_norm);
    EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 3e-4);
    EXPECT_DOUBLE_EQ(j.at("tps").get<double>(), 2000);
    EXPECT_DOUBLE_EQ(j.at("tflops").get<double>(), 2000 * 6e6 / 1e12);
    EXPECT_DOUBLE_EQ(j.at("mfu_pct").get<double>(), 12);
    EXPECT_DOUBLE_EQ(j.at("step_time_s").get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j.at("eta_s").get<double>(), 0.25 * static_cast<double>(4 - m.step));
    EXPECT_GE(j.at("memory_peak_bytes").get<int64_t>(), 4096);
    EXPECT_LE(j.at("memory_peak_bytes").get<int64_t>(), peak_now);
    EXPECT_DOUBLE_EQ(j.at("moe/imbalance").get<double>(), 0.1 * static_cast<double>(m.step));
  }

  // A resumed run appends to the same file.
  {
    MetricsLogger logger(options(dir.path() / "new" / "run", 2, 4), console);
    logger.record(step(1, 500, 0.25));
  }
  EXPECT_EQ(read_lines(dir.path() / "new" / "run" / "metrics.jsonl").size(), logged.size() + 1);
}

// A validation pass goes to every sink, in records apart from the steps': a console line, a JSONL
// line whose keys no step record has, and TensorBoard tags of its own at the step it followed.
TEST(Metrics, ValidationGoesToEverySinkInRecordsOfItsOwn) {
  TempDir dir;
  MetricsOptions o = options(dir.path(), 2, 4);
  o.enable_tensorboard = true;
  std::ostringstream console;
  fs::path tb_file;
  const train::ValidationMetrics v{.step = 2, .loss = 2.3456, .tokens = 4096, .seconds = 1.25};
  {
    MetricsLogger logger(o, console);
    logger.record(step(2, 500, 0.25));
    logger.record_validation(v);
    tb_file = logger.tensorboard_path();
  }
  EXPECT_NE(console.str().find("validate step 2  loss 2.3456  ppl 10.44  (1.2 s)\n"), std::string::npos)
      << console.str();

  std::vector<std::string> lines = read_lines(dir.path() / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  nlohmann::json j = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(j.at("step").get<int64_t>(), 2);
  EXPECT_GT(j.at("wall_time").get<double>(), 1.6e9);
  EXPECT_DOUBLE_EQ(j.at("validation/loss").get<double>(), 2.3456);
  EXPECT_DOUBLE_EQ(j.at("validation/perplexity").get<double>(), std::exp(2.3456));
  EXPECT_EQ(j.at("validation/tokens").get<int64_t>(), 4096);
  EXPECT_DOUBLE_EQ(j.at("validation/time_s").get<double>(), 1.25);
  EXPECT_FALSE(j.contains("loss")) << "a reader of step records would take it for one: " << lines[1];

  std::vector<std::string> records = read_records(tb_file);
  ASSERT_EQ(records.size(), 3u);  // version, step 2, validation after step 2
  tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(records[2]));
  EXPECT_EQ(e.step(), 2);
  ASSERT_EQ(e.summary().value_size(), 2);
  EXPECT_EQ(e.summary().value(0).tag(), "validation/loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 2.3456f);
  EXPECT_EQ(e.summary().value(1).tag(), "validation/perplexity");
  EXPECT_EQ(e.summary().value(1).simple_value(), static_cast<float>(std::exp(2.3456)));
}

TEST(Metrics, FormatsBytesAndDurations) {
  EXPECT_EQ(train::format_bytes(512), "512 B");
  EXPECT_EQ(train::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(train::format_bytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(train::format_bytes(int64_t{5} << 50), "5120.00 TiB");
  EXPECT_EQ(train::format_duration(0), "0:00:00");
  EXPECT_EQ(train::format_duration(83), "0:01:23");
  EXPECT_EQ(train::format_duration(12 * 3600 + 5), "12:00:05");
  EXPECT_EQ(train::format_duration(90061), "1d 01:01:01");
  EXPECT_EQ(train::format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(Metrics, RejectsWhatCannotBeLogged) {
  TempDir dir;
  std::ostringstream console;
  std::ofstream(dir.path() / "a_file") << "x";
  EXPECT_TITAN_ERROR(MetricsLogger(options(dir.path() / "a_file" / "run", 1, 1), console), "job.dump_folder",
                     "a_file", "cannot be created");
  EXPECT_TITAN_ERROR(MetricsLogger(options(dir.path(), 0, 1), console), "metrics.log_freq");
  MetricsOptions no_peak = options(dir.path(), 1, 1);
  no_peak.peak_flops = 0;
  EXPECT_TITAN_ERROR(MetricsLogger(no_peak, console), "peak_flops", "resolve_peak_flops");

  MetricsLogger logger(options(dir.path(), 1, 5), console);
  StepMetrics shadowing = step(1, 1, 1);
  shadowing.extra = {{"loss", 1}};
  EXPECT_TITAN_ERROR(logger.record(shadowing), "extra scalar name 'loss'");
  EXPECT_EQ(read_lines(logger.jsonl_path()).size(), 0u) << "a rejected step must write nothing";
  StepMetrics twice = step(1, 1, 1);
  twice.extra = {{"moe/x", 1}, {"moe/x", 2}};
  EXPECT_TITAN_ERROR(logger.record(twice), "extra scalar name 'moe/x'");
  ASSERT_TRUE(logger.record(step(1, 1, 1))) << "a rejected step leaves the logger as it was";
  EXPECT_TITAN_ERROR(logger.record(step(1, 1, 1)), "step 1 after step 1");
  EXPECT_TITAN_ERROR(logger.record(step(6, 1, 1)), "total_steps=5");
  EXPECT_TITAN_ERROR(logger.record(step(3, 1, 0)), "step_seconds=0");
}

// ---- peak FLOP/s --------------------------------------------------------------------------------

TEST(PeakFlops, CacheReadWrite) {
  TempDir dir;
  fs::path cache = dir.path() / "sub" / "peak_flops.json";
  EXPECT_FALSE(train::read_cached_peak_flops(cache, "cpu | 2 threads"));
  train::write_cached_peak_flops(cache, "cpu | 2 threads", 1.5e11);
  train::write_cached_peak_flops(cache, "cpu | 4 threads", 2.5e11);
  train::write_cached_peak_flops(cache, "cpu | 2 threads", 1.75e11);
  EXPECT_EQ(train::read_cached_peak_flops(cache, "cpu | 2 threads"), 1.75e11);
  EXPECT_EQ(train::read_cached_peak_flops(cache, "cpu | 4 threads"), 2.5e11);
  EXPECT_FALSE(train::read_cached_peak_flops(cache, "cpu | 8 threads"));
  EXPECT_EQ(std::distance(fs::directory_iterator(cache.parent_path()), fs::directory_iterator()), 1)
      << "a temporary file was left behind";

  std::ofstream(cache) << "[1, 2]";
  EXPECT_TITAN_ERROR(train::read_cached_peak_flops(cache, "k"), cache.string(), "delete it");
  std::ofstream(cache) << R"({"k": "fast"})";
  EXPECT_TITAN_ERROR(train::read_cached_peak_flops(cache, "k"), "key 'k'", "positive number");
}

TEST(PeakFlops, KeyNamesCpuThreadsAndBlasKernels) {
  std::string key = train::peak_flops_cache_key();
  EXPECT_NE(key.find(train::cpu_model_name()), std::string::npos);
  EXPECT_NE(key.find(std::to_string(num_threads()) + " threads"), std::string::npos) << key;
  // The same CPU runs GEMMs several times slower on older kernels: a figure measured on one
  // kernel set must not stand for another.
  EXPECT_NE(key.find("OpenBLAS " + kernels::cpu::blas_corename()), std::string::npos) << key;
}

// A bf16 run's MFU divides by the bf16 products' peak: a figure of its own, keyed by the library
// and instructions that run them, never the f32 one.
TEST(PeakFlops, Bf16HasItsOwnKeyAndFigure) {
  TITAN_SKIP_WITHOUT_BF16();
  const std::string key = train::peak_flops_cache_key(kBF16);
  EXPECT_NE(key, train::peak_flops_cache_key(kF32));
  EXPECT_NE(key.find("oneDNN " + kernels::cpu::onednn_version()), std::string::npos) << key;
  EXPECT_NE(key.find(kernels::cpu::onednn_bf16_isa() + " bf16"), std::string::npos) << key;
  TempDir dir;
  fs::path cache = dir.path() / "peak_flops.json";
  train::write_cached_peak_flops(cache, train::peak_flops_cache_key(kF32), 4.2e9);
  train::PeakFlops bf16 = train::resolve_peak_flops(0, kBF16, cache, /*min_cpu_share=*/0);
  EXPECT_NE(bf16.flops_per_second, 4.2e9);
  EXPECT_NE(bf16.source.find("measured (bf16 GEMM)"), std::string::npos) << bf16.source;
  EXPECT_EQ(train::read_cached_peak_flops(cache, key), bf16.flops_per_second);
  EXPECT_EQ(train::read_cached_peak_flops(cache, train::peak_flops_cache_key(kF32)), 4.2e9);
}

TEST(PeakFlops, ConfiguredValueWinsAndNegativeIsRejected) {
  TempDir dir;
  train::PeakFlops p = train::resolve_peak_flops(3e12, kF32, dir.path() / "never_written.json");
  EXPECT_EQ(p.flops_per_second, 3e12);
  EXPECT_EQ(p.source, "metrics.peak_flops");
  EXPECT_FALSE(fs::exists(dir.path() / "never_written.json"));
  EXPECT_EQ(train::resolve_peak_flops(2e12).flops_per_second, 2e12);
  EXPECT_TITAN_ERROR(train::resolve_peak_flops(-1, kF32, dir.path() / "c.json"), "metrics.peak_flops");
}

TEST(PeakFlops, CachedFigureIsUsedWithoutMeasuring) {
  TempDir dir;
  fs::path cache = dir.path() / "peak_flops.json";
  train::write_cached_peak_flops(cache, train::peak_flops_cache_key(), 4.2e9);
  train::PeakFlops p = train::resolve_peak_flops(0, kF32, cache);
  EXPECT_EQ(p.flops_per_second, 4.2e9);
  EXPECT_NE(p.source.find("cached"), std::string::npos) << p.source;
}

// Cached whatever the load (min_cpu_share 0): the tests share the cores with one another.
TEST(PeakFlops, MeasuresOnceThenCaches) {
  TempDir dir;
  fs::path cache = dir.path() / "peak_flops.json";
  train::PeakFlops measured = train::resolve_peak_flops(0, kF32, cache, /*min_cpu_share=*/0);
  EXPECT_GT(measured.flops_per_second, 1e9) << "a CPU sgemm below 1 GFLOP/s means the benchmark is broken";
  EXPECT_NE(measured.source.find("measured"), std::string::npos) << measured.source;
  EXPECT_EQ(train::read_cached_peak_flops(cache, train::peak_flops_cache_key()), measured.flops_per_second);
  train::PeakFlops again = train::resolve_peak_flops(0, kF32, cache);
  EXPECT_EQ(again.flops_per_second, measured.flops_per_second);
  EXPECT_NE(again.source.find("cached"), std::string::npos) << again.source;
}

// A figure measured on shared cores serves the run, is not cached, and the log says why. A share
// above 1 cannot be reached, so this path runs whatever the load.
TEST(PeakFlops, AFigureFromSharedCoresIsNotCached) {
  TempDir dir;
  fs::path cache = dir.path() / "peak_flops.json";
  const train::PeakFlops p = train::resolve_peak_flops(0, kF32, cache, /*min_cpu_share=*/1.01);
  EXPECT_GT(p.flops_per_second, 0);
  EXPECT_NE(p.source.find("other processes held the cores"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("not cached"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("metrics.peak_flops"), std::string::npos) << p.source;
  EXPECT_FALSE(train::read_cached_peak_flops(cache, train::peak_flops_cache_key()));
}

// Processes spinning on every core take half of them from the measurement, and its share says so.
TEST(PeakFlops, SharedCoresShowInTheShare) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<pid_t> spinners;
  for (unsigned i = 0; i < cores; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0)
      for (;;) asm volatile("");
    spinners.push_back(pid);
  }
  // Calls long enough (2048^3, about 90 ms on 2 cores) that the scheduler shares every one of them.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const train::PeakMeasurement m = train::measure_peak(kF32, 2048, 3, 1.0);
  for (pid_t pid : spinners) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_GT(m.flops_per_second, 0);
  EXPECT_LT(m.cpu_share, train::kPeakMinCpuShare) << "with a spinning process per core";
}

TEST(PeakFlops, SmallMeasurementIsPositive) {
  EXPECT_GT(train::measure_peak_flops(kF32, 128, 2, 0.1), 0);
}

}  // namespace
}  // namespace titan
