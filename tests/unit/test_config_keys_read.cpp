// Every key of the job config is read by the code it names, or refused: set to a value other than
// its default, a short training run must do something different (its losses, its log, the files
// it writes) or stop with an error. A key that is accepted and then ignored fails here, so a new
// key cannot be added without a reader. The run exercises every feature a key belongs to (data in
// each format, checkpoints, validation, traces, memory snapshots, TensorBoard, colours), so that
// each key has something to change.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

// Keys whose effect needs more than one rank; the test named shows it.
const std::map<std::string, std::string> kMultiRankKeys = {
    {"parallelism.fsdp_reshard_after_forward", "tests/dist FullyShard.* (reshard after forward or not)"},
    {"comm.timeout_seconds", "tests/dist Collectives.* (a silent rank named after the timeout)"},
    {"metrics.save_for_all_ranks", "tests/dist MetricsAllRanks.EveryRankWritesItsOwnMetricsOnlyWhenAsked"},
};

// A corpus in every format a [training] key chooses between: text (documents split at blank
// lines, one invalid UTF-8), and JSONL with a field of its own.
fs::path corpus(const fs::path& dir) {
  fs::path data = dir / "corpus";
  fs::create_directories(data);
  std::ofstream text(data / "a.txt", std::ios::binary);
  for (int i = 0; i < 60; ++i) text << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  text << "bad \xff byte\n\n";
  std::ofstream jsonl(data / "b.jsonl");
  for (int i = 0; i < 60; ++i)
    jsonl << R"({"text": "And the earth was without form, and void. )" << i << R"(", "other": "x"})" << "\n";
  return data;
}

std::vector<std::string> baseline(const fs::path& dir, const fs::path& data) {
  return {"--training.dataset_path=" + data.string(), "--training.bad_data=skip", "--training.seq_len=16",
          "--training.local_batch_size=2", "--training.steps=4", "--training.max_norm=0.01",
          "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=1", "--metrics.enable_jsonl=true",
          "--metrics.enable_tensorboard=true", "--metrics.peak_flops=1e11", "--job.dump_folder=" + (dir / "out").string(),
          "--checkpoint.enable=true", "--checkpoint.interval=2", "--checkpoint.keep_latest_k=1", "--validation.enable=true",
          "--validation.dataset_path=" + data.string(), "--validation.seq_len=16", "--validation.local_batch_size=2",
          "--validation.steps=1", "--validation.freq=2", "--profiling.enable_profiling=true",
          "--profiling.profile_freq=2", "--profiling.enable_memory_snapshot=true"};
}

// What a run did, with what varies from run to run (times, rates, paths of temporary folders)
// taken out.
struct Outcome {
  std::string error;
  std::vector<double> losses, grad_norms, validation_losses;
  std::vector<std::string> log;
  std::map<std::string, std::string> files;  // path under the job folder -> content (weights) or ""

  bool operator==(const Outcome&) const = default;
};

// Where two outcomes differ first, for a failure's message.
std::string first_difference(const Outcome& a, const Outcome& b) {
  if (a.error != b.error) return "error: '" + a.error + "' vs '" + b.error + "'";
  if (a.losses != b.losses || a.grad_norms != b.grad_norms || a.validation_losses != b.validation_losses)
    return "losses";
  for (size_t i = 0; i < std::max(a.log.size(), b.log.size()); ++i) {
    const std::string x = i < a.log.size() ? a.log[i] : "(none)", y = i < b.log.size() ? b.log[i] : "(none)";
    if (x != y) return "log line " + std::to_string(i) + ": '" + x + "' vs '" + y + "'";
  }
  for (const auto& [path, content] : a.files)
    if (!b.files.contains(path) || b.files.at(path) != content) return "file " + path;
  for (const auto& [path, content] : b.files)
    if (!a.files.contains(path)) return "file " + path;
  return "";
}

std::string normalise(std::string line, const fs::path& dir) {
  for (size_t at; (at = line.find(dir.string())) != std::string::npos;) line.replace(at, dir.string().size(), "<dir>");
  static const std::regex volatile_figures(
      R"(((tps|tflops|mfu|mem|eta) [0-9.:%]+( [KMG]iB)?)|(\([0-9.]+ s\))|([0-9.]+ (s|ms)\b)|(pid [0-9]+))");
  return std::regex_replace(line, volatile_figures, "#");
}

Outcome run(const std::vector<std::string>& overrides, const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != "corpus") fs::remove_all(entry.path());
  Outcome o;
  std::ostringstream log;
  try {
    const JobConfig cfg = load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", overrides);
    TrainResult r = Trainer(cfg, log).train();
    o.losses = r.losses;
    o.grad_norms = r.grad_norms;
    for (const auto& v : r.validations) o.validation_losses.push_back(v.loss);
  } catch (const Error& e) {
    o.error = e.message();
  }
  std::istringstream lines(log.str());
  for (std::string line; std::getline(lines, line);) o.log.push_back(normalise(line, dir));
  if (fs::exists(dir))
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().string().find("/corpus/") != std::string::npos) continue;
      // TensorBoard names its files by the time they were opened.
      static const std::regex opened_at(R"(tfevents\.[0-9]+)");
      const std::string rel = std::regex_replace(fs::relative(entry.path(), dir).string(), opened_at, "tfevents");
      o.files[rel] = entry.path().extension() == ".safetensors" ? test::slurp(entry.path()) : "";
    }
  return o;
}

// A value of `ref`'s type other than the one it holds that `rule` allows, as an override spells it;
// empty when there is none.
std::string other_value(const config::Ref& ref, const config::Rule& rule) {
  auto allowed = [&](auto candidate) {
    using T = decltype(candidate);
    T copy = candidate;
    return !rule.violation(config::Ref(&copy)).has_value();
  };
  return std::visit(
      [&](const auto* p) -> std::string {
        using V = std::remove_cvref_t<decltype(*p)>;
        if constexpr (std::is_same_v<V, bool>) {
          return *p ? "false" : "true";
        } else if constexpr (std::is_same_v<V, int64_t>) {
          for (int64_t c : {*p + 1, *p * 2, int64_t{2}, int64_t{1}, int64_t{0}})
            if (c != *p && allowed(c)) return std::to_string(c);
        } else if constexpr (std::is_same_v<V, double>) {
          for (double c : {*p * 2, *p + 0.25, 0.5, 1.0})
            if (c != *p && allowed(c)) return config::format_value(c);
        } else if constexpr (std::is_same_v<V, std::string>) {
          for (const std::string& c : rule.choices)
            if (c != *p) return c;
          if (rule.choices.empty()) return *p + "_other";
        } else {
          if (p->has_value()) return "none";
          using T = typename V::value_type;
          for (T c : {T(2), T(1), T(0)}) {
            if (!allowed(std::optional<T>(c))) continue;
            if constexpr (std::is_same_v<T, bool>) return "true";
            if constexpr (std::is_same_v<T, int64_t>) return std::to_string(c);
            if constexpr (std::is_same_v<T, double>) return config::format_value(c);
          }
        }
        return "";
      },
      ref);
}

TEST(ConfigKeys, EveryKeyIsReadOrRefused) {
#if defined(__SANITIZE_ADDRESS__)
  // Some 80 training runs test what keys mean, not memory safety, which the other tests check
  // under the sanitizers; the release run covers this one.
  GTEST_SKIP() << "config semantics, run in the release build";
#endif
  const fs::path dir = test::temp_dir("config_keys_read");
  const fs::path data = corpus(dir);
  setenv("FORCE_COLOR", "1", 1);
  const std::vector<std::string> base = baseline(dir, data);
  const Outcome reference = run(base, dir);
  ASSERT_EQ(reference.error, "");
  ASSERT_EQ(reference.losses.size(), 4u);
  const Outcome again = run(base, dir);
  ASSERT_TRUE(again == reference) << "the baseline run must repeat exactly, or no comparison means anything: "
                                  << first_difference(again, reference);

  JobConfig defaults = load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", base);
  std::vector<std::string> ignored;
  for (const auto& section : job_config_schema().engine().sections()) {
    for (const auto& part : section.parts) {
      for (const auto& key : part.keys) {
        const std::string name = section.name + "." + key.key;
        if (kMultiRankKeys.contains(name)) continue;
        // -1 derives the global batch as 2: ask for another.
        const std::string value = name == "training.global_batch_size"
                                      ? "4"
                                      : other_value(key.ref(part.locate(&defaults)), key.rule);
        if (value.empty()) continue;  // one allowed value: nothing can be asked of it
        std::vector<std::string> overrides = base;
        overrides.push_back("--" + name + "=" + value);
        const Outcome outcome = run(overrides, dir);
        if (outcome == reference) ignored.push_back("--" + name + "=" + value);
        if (std::getenv("TITAN_TEST_VERBOSE"))
          std::cout << name << "=" << value << ": " << first_difference(outcome, reference).substr(0, 300) << "\n";
      }
    }
  }
  unsetenv("FORCE_COLOR");
  EXPECT_TRUE(ignored.empty()) << "keys set to another value that changed nothing: "
                               << ::testing::PrintToString(ignored);
}

}  // namespace
}  // namespace titan::train
