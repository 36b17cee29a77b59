// titan train --dry-run: one rank of a large layout built alone, on meta, holding only its part.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

DryRunReport dry(const std::string& config, int ranks, std::vector<std::string> overrides,
                 std::string* log = nullptr, DryRunOptions options = {}) {
  std::ostringstream out;
  DryRunReport r = dry_run(load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + config, overrides),
                           ranks, 0, out, options);
  if (log) *log = out.str();
  return r;
}

// The layouts of the tests below: each cuts the bulk of the parameters `splits` ways.
struct Case {
  const char* config;
  int ranks;
  std::vector<std::string> overrides;
  int splits;
};
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"llama3/debug.toml", 8, {}, 8},
      {"llama3/debug.toml", 8, {"--parallelism.tensor_parallel_degree=2"}, 8},
      // The experts are replicated across tp: FSDP alone cuts them.
      {"qwen3/debug_moe.toml",
       4,
       {"--parallelism.tensor_parallel_degree=2", "--moe.load_balance_bias=false"},
       2},
      // ep 2 borrows from dp_shard 4: ep and efsdp cut the experts 4 ways, FSDP the rest 4 ways.
      {"qwen3/debug_moe.toml", 4, {"--parallelism.expert_parallel_degree=2"}, 4},
      // pp 2 keeps half the layers (rank 0: the embedding too) and FSDP shards them 4 ways.
      {"llama3/debug.toml", 8, {"--parallelism.pipeline_parallel_degree=2"}, 8},
      // Replicas hold it all, and DDP's buckets as much again.
      {"llama3/debug.toml",
       2,
       {"--parallelism.data_parallel_replicate_degree=2", "--parallelism.data_parallel_shard_degree=1"},
       1},
      // cp ranks hold the same parameters.
      {"llama3/debug.toml",
       8,
       {"--parallelism.tensor_parallel_degree=2", "--parallelism.context_parallel_degree=2"},
       4},
  };
  return all;
}

// The plan, on meta, counts a rank's share: the whole over the ranks that split it (FSDP pads the
// last rows; replicated norms are whole on every tp rank), far from the whole.
TEST(DryRun, PlanCountsThisRanksShareOnly) {
  for (const Case& c : cases()) {
    std::string log;
    const DryRunReport one = dry(c.config, 1, {}), r = dry(c.config, c.ranks, c.overrides, &log);
    const std::string what = std::string(c.config) + " on " + std::to_string(c.ranks);
    EXPECT_LT(r.plan.param_bytes, 1.2 * one.plan.param_bytes / c.splits) << what << "\n" << log;
    EXPECT_GT(r.plan.param_bytes, 0.8 * one.plan.param_bytes / c.splits / 2) << what << "\n" << log;
    EXPECT_EQ(r.plan.optimizer_bytes, 2 * r.plan.param_bytes) << what;
    EXPECT_EQ(r.startup_peak_bytes, 0) << "measured without being asked to initialise";
    EXPECT_NE(log.find("dry run of rank 0 of " + std::to_string(c.ranks)), std::string::npos) << log;
    EXPECT_NE(log.find("memory plan (rank 0 of " + std::to_string(c.ranks) + ", eager)"), std::string::npos)
        << log;
  }
}

// Start-up, initialising a small model's rank for real, holds this rank's parameters and AdamW
// moments, as the plan says, never the whole model: within 10% of the plan's start-up figure.
TEST(DryRun, StartUpHoldsThisRanksShareOnly) {
  for (const Case& c : cases()) {
    std::string log;
    const DryRunReport r = dry(c.config, c.ranks, c.overrides, &log, {.initialise = true});
    const std::string what = std::string(c.config) + " on " + std::to_string(c.ranks);
    EXPECT_LE(r.startup_peak_bytes, 1.1 * r.plan.startup_bytes()) << what << "\n" << log;
    EXPECT_GE(r.startup_peak_bytes, 0.9 * r.plan.startup_bytes()) << what << "\n" << log;
  }
}

// The seed's flagship preset and its smaller sibling as a new user runs them: at any rank count
// every rank holds within 5% of the whole model's float32 parameters over the ranks. (Splitting
// dim 0 alone, as FSDP2 does, left each of 1024 ranks a whole expert of 128: 7.7x its share.)
TEST(DryRun, PresetParametersSplitEvenlyAtAnyRankCount) {
  for (const char* config : {"qwen3/235b_a22b.toml", "qwen3/30b_a3b.toml"}) {
    const double whole = static_cast<double>(dry(config, 1, {"--training.memory_check=warn"}).plan.param_bytes);
    for (int ranks : {8, 64, 256, 1024}) {
      std::string log;
      const DryRunReport r = dry(config, ranks, {"--training.memory_check=warn"}, &log);
      const double ratio = static_cast<double>(r.plan.param_bytes) / (whole / ranks);
      EXPECT_LE(ratio, 1.05) << config << " over " << ranks << " ranks\n" << log;
      EXPECT_GE(ratio, 1.0) << config << " over " << ranks << " ranks\n" << log;
    }
  }
}

// TorchTitan's MoE [parallelism] keys carry over unchanged: expert parallelism borrows dp_shard's
// ranks (8 ranks are ep 8 within dp_shard 8, not 64), and every rank holds an eighth.
TEST(DryRun, TorchTitansMoeParallelismKeysStart) {
  const std::vector<std::string> torchtitan = {
      "--parallelism.data_parallel_replicate_degree=1", "--parallelism.data_parallel_shard_degree=-1",
      "--parallelism.fsdp_reshard_after_forward=default", "--parallelism.tensor_parallel_degree=1",
      "--parallelism.expert_parallel_degree=8", "--parallelism.expert_tensor_parallel_degree=1"};
  std::string log;
  const DryRunReport one = dry("qwen3/debug_moe.toml", 1, {}), r = dry("qwen3/debug_moe.toml", 8, torchtitan, &log);
  EXPECT_NE(log.find("dp_shard 8 (ep 8 within it) (8 ranks)"), std::string::npos) << log;
  EXPECT_LT(r.plan.param_bytes, 1.1 * one.plan.param_bytes / 8) << log;
  std::vector<std::string> etp = torchtitan;
  etp.push_back("--parallelism.expert_tensor_parallel_degree=2");
  EXPECT_TITAN_ERROR(dry("qwen3/debug_moe.toml", 8, etp), "parallelism.expert_tensor_parallel_degree = 2",
                     "set it to 1");
}

// A layout no machine here could launch, planned without allocating: Qwen3 235B over 64 ranks
// (876 GiB of float32 parameters) in a few MiB, each rank's parameters 1/64 of the whole.
TEST(DryRun, ALargeLayoutIsPlannedWithoutAllocatingTheModel) {
  CpuAllocator::instance().reset_peak();
  const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
  std::string log;
  const DryRunReport r = dry("qwen3/235b_a22b.toml", 64, {"--training.memory_check=warn"}, &log);
  const int64_t allocated = CpuAllocator::instance().stats().peak_allocated_bytes - before;
  EXPECT_LT(allocated, 64 << 20) << log;
  const double whole = 235.09e9 * 4;
  EXPECT_GT(static_cast<double>(r.plan.param_bytes), whole / 64) << log;
  EXPECT_LT(static_cast<double>(r.plan.param_bytes), 1.01 * whole / 64) << log;
  EXPECT_NE(log.find("whose float32 values alone would take 875.79"), std::string::npos) << log;
  EXPECT_NE(log.find("warning: training.memory_check = \"warn\": this rank needs about"), std::string::npos)
      << log;

  // Over a billion ranks every rank holds a row of each parameter at most: a plan, at once.
  CpuAllocator::instance().reset_peak();
  const DryRunReport many = dry("qwen3/235b_a22b.toml", 1000000000, {"--training.memory_check=warn"}, &log);
  EXPECT_LT(CpuAllocator::instance().stats().peak_allocated_bytes - before, 64 << 20) << log;
  EXPECT_LT(many.plan.param_bytes, r.plan.param_bytes) << log;
}

TEST(DryRun, ALayoutThatDoesNotSplitIsRefusedNamingTheKey) {
  try {
    dry("llama3/debug.toml", 6, {"--parallelism.tensor_parallel_degree=3"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.tensor_parallel_degree = 3"), std::string::npos)
        << e.what();
  }
  // 8 experts do not split over 3 ep ranks.
  try {
    dry("qwen3/debug_moe.toml", 3,
        {"--parallelism.expert_parallel_degree=3", "--parallelism.data_parallel_shard_degree=-1"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.expert_parallel_degree = 3"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("moe.num_experts"), std::string::npos) << e.what();
  }
}

// A capacity per expert is the local dispatcher's; the all-to-all one of expert parallelism has
// none yet, and a dense model has no experts to cap.
TEST(DryRun, CapacityFactorWithExpertParallelismOrNoExpertsIsRefused) {
  EXPECT_TITAN_ERROR(dry("qwen3/debug_moe.toml", 2,
                         {"--parallelism.expert_parallel_degree=2", "--parallelism.data_parallel_shard_degree=-1",
                          "--moe.capacity_factor=1.25"}),
                     "moe.capacity_factor = 1.25", "parallelism.expert_parallel_degree = 2",
                     "set capacity_factor = 0");
  EXPECT_TITAN_ERROR(dry("llama3/debug.toml", 1, {"--moe.capacity_factor=1.25"}), "moe.capacity_factor = 1.25",
                     "no experts");
}

}  // namespace
}  // namespace titan::train
