#include "support/small_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "support/test_util.h"

namespace titan::train {

namespace fs = std::filesystem;

JobConfig small_config(const std::vector<std::string>& overrides, const std::string& base) {
  fs::path dir = test::temp_dir("trainer_test");
  fs::path text = dir / "corpus.txt";
  if (!fs::exists(text)) {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i)
      f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  std::vector<std::string> o = {"--training.dataset_path=" + text.string(), "--training.seq_len=32",
                                "--training.local_batch_size=4", "--training.steps=4",
                                "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                // Every run starts afresh: none resumes from the one before.
                                "--checkpoint.enable=false"};
  // Graph runs go to $TITAN_GRAPH_PLUGIN's device, with $TITAN_GRAPH_PLUGIN_OPTIONS, where they
  // are set (scripts/gpu_check.sh sets them), unless the test names its own (its override comes
  // later and wins).
  if (std::find(overrides.begin(), overrides.end(), "--compile.enable=true") != overrides.end()) {
    for (const auto& [env, key] :
         {std::pair{"TITAN_GRAPH_PLUGIN", "plugin"}, {"TITAN_GRAPH_PLUGIN_OPTIONS", "plugin_options"}}) {
      const char* value = std::getenv(env);
      if (value && *value) o.push_back(std::string("--compile.") + key + "=" + value);
    }
  }
  o.insert(o.end(), overrides.begin(), overrides.end());
  return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + base, o);
}

TrainResult run(const JobConfig& cfg) {
  std::ostringstream log;
  Trainer t(cfg, log);
  return t.train();
}

void expect_bf16_curve_near_float32(const std::string& base, const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {
      "--training.steps=100", "--training.local_batch_size=2",
      "--training.dataset_path=" + std::string(TITAN_SOURCE_DIR) + "/data/kjv.txt.gz"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  std::vector<std::string> bf16 = o;
  bf16.push_back("--training.mixed_precision_param=bfloat16");
  const TrainResult f32 = run(small_config(o, base)), mixed = run(small_config(bf16, base));
  ASSERT_EQ(mixed.losses.size(), 100u);
  ASSERT_EQ(f32.losses.size(), 100u);
  std::vector<double> windows;
  for (size_t w = 0; w < 100; w += 10) {
    double a = 0, b = 0;
    for (size_t i = w; i < w + 10; ++i) a += f32.losses[i], b += mixed.losses[i];
    EXPECT_NEAR(b, a, 0.02 * a) << "mean loss of steps " << w + 1 << "-" << w + 10;
    windows.push_back(a);
  }
  EXPECT_NE(mixed.losses, f32.losses) << "the bf16 run repeated float32's losses exactly";
  EXPECT_LT(windows.back(), 0.85 * windows.front()) << "the run must learn for the curves to mean something";
}

}  // namespace titan::train
