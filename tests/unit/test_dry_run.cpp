// titan train --dry-run: one rank of a large layout built alone, on meta, holding only its part.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/train/config/job_config.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

DryRunReport dry(const std::string& config, int ranks, std::vector<std::string> overrides,
                 std::string* log = nullptr) {
  std::ostringstream out;
  DryRunReport r = dry_run(load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + config, overrides),
                           ranks, 0, out);
  if (log) *log = out.str();
  return r;
}

// Start-up holds this rank's parameters and AdamW moments (3/4 of what training keeps, before
// gradients exist), never the whole model: the target is within 10% of the training state.
TEST(DryRun, StartUpHoldsThisRanksShareOnly) {
  struct Case {
    const char* config;
    int ranks;
    std::vector<std::string> overrides;
    int splits;  // how many ways the bulk of the parameters is cut
  };
  const std::vector<Case> cases = {
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
      // cp ranks hold the same parameters.
      {"llama3/debug.toml",
       8,
       {"--parallelism.tensor_parallel_degree=2", "--parallelism.context_parallel_degree=2"},
       4},
  };
  for (const Case& c : cases) {
    std::string log;
    const DryRunReport one = dry(c.config, 1, {}), r = dry(c.config, c.ranks, c.overrides, &log);
    const std::string what = std::string(c.config) + " on " + std::to_string(c.ranks);
    EXPECT_LE(r.peak_bytes, 1.1 * r.training_bytes) << what << "\n" << log;
    EXPECT_GE(r.peak_bytes, 0.7 * r.training_bytes) << what << "\n" << log;
    // A rank's share: the whole over the ranks that split it (FSDP pads the last rows; replicated
    // norms are whole on every tp rank), far from the whole.
    EXPECT_LT(r.param_bytes, 1.2 * one.param_bytes / c.splits) << what << "\n" << log;
    EXPECT_NE(log.find("dry run of rank 0 of " + std::to_string(c.ranks)), std::string::npos) << log;
  }
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
