// FLUX training under FSDP over the world's ranks takes the steps one rank takes on the same
// global batch: the same samples, noise, t and prompt dropout (drawn per global sample slot,
// train/flux/flux_batches.h), so losses and validation losses agree to rounding.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/synthetic_flux_cache.h"
#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

// The synthetic shapes cache in this job's folder `name` (written by rank 0), and the flux-tiny
// config over it: 32 px images (16 image tokens), 8 T5 tokens, a global batch of 4 over `dp`
// data-parallel ranks, 6 steps, validation every 3 (or none: flux_tiny.toml's validation keys back to
// their defaults), and `extra` overrides.
struct FluxJob {
  fs::path dir;
  JobConfig config(int dp, const std::string& out, bool validation, const std::vector<std::string>& extra = {}) const {
    const int64_t global_batch = 4;
    std::vector<std::string> keys = {"--flux.cache_path=" + (dir / "cache").string(), "--flux.image_size=32",
                                     "--flux.t5_length=8", "--training.steps=6",
                                     "--training.local_batch_size=" + std::to_string(global_batch / dp),
                                     "--lr_scheduler.warmup_steps=2", "--checkpoint.enable=false",
                                     "--metrics.log_freq=100", "--metrics.enable_jsonl=false",
                                     "--metrics.peak_flops=1e11", "--job.dump_folder=" + (dir / out).string()};
    keys = validation ? testing::join(keys, {"--flux.validation_samples=4", "--validation.freq=3",
                                             "--validation.local_batch_size=2"})
                      : testing::join(keys, {"--validation.enable=false", "--flux.validation_samples=8"});
    return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml", testing::join(keys, extra));
  }
};

// None on every rank when rank 0 could not make the data, so that all stop together.
std::optional<FluxJob> make_job(const std::string& name) {
  dist::ProcessGroup& world = dist::world();
  const fs::path dir = testing::job_dir(0) / name;
  double made = 0;  // rank 0's verdict, the others' 0, summed
  if (world.rank() == 0) {
    fs::remove_all(dir);
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                            "/scripts/make_shapes.py' make --count 12 --out '" + (dir / "data").string() + "' > /dev/null";
    made = std::system(cmd.c_str()) == 0 ? 1 : 0;
    if (made == 1) test::write_synthetic_cache(dir / "data", dir / "cache", {});
  }
  if (world.all_reduce(made, dist::ReduceOp::sum) != 1) return std::nullopt;
  return FluxJob{dir};
}

constexpr const char* kNoPython = "the reference Python (numpy, Pillow) did not run: make deps-test";

TEST(FluxTrain, FsdpOverTheRanksTakesOneRanksStepsOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const std::optional<FluxJob> job = make_job("flux_train");
  ASSERT_TRUE(job) << kNoPython;
  const testing::OneRankReference want = testing::one_rank_run(job->config(1, "one", true));

  std::ostringstream log;
  const TrainResult all = Trainer(job->config(n, "all", true), log, world).train();
  // Only world rank 0 writes the log.
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("dp_shard " + std::to_string(n)), std::string::npos) << log.str();
  }
  const double worst = std::max(testing::expect_one_rank_figures(all, want, "flux-tiny, FSDP"),
                                testing::expect_one_rank_validation(all, want, "flux-tiny, FSDP"));
  if (world.rank() == 0)
    std::cout << "flux-tiny FSDP on " << n << " ranks vs 1: largest relative loss difference " << worst << "\n";
}

// Context parallelism over 2 ranks (with FSDP over the rest): each holds half of every sample's
// text and image tokens, attention runs as a ring over both, and the steps and validation losses
// are one rank's.
TEST(FluxTrain, ContextParallelTakesOneRanksSteps) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n % 2 != 0) GTEST_SKIP() << "context parallelism of 2 needs an even number of ranks";
  const std::optional<FluxJob> job = make_job("flux_train_cp");
  ASSERT_TRUE(job) << kNoPython;
  const testing::OneRankReference want = testing::one_rank_run(job->config(1, "one", true));

  std::ostringstream log;
  const TrainResult all =
      Trainer(job->config(n / 2, "cp", true, {"--parallelism.context_parallel_degree=2"}), log, world).train();
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("context parallel over 2 ranks (ring attention; each holds 4 text and 8 image tokens"),
              std::string::npos)
        << log.str();
  }
  double worst = std::max(testing::expect_one_rank_figures(all, want, "flux-tiny, cp 2"),
                          testing::expect_one_rank_validation(all, want, "flux-tiny, cp 2"));
  // Checkpointed blocks run their ring again in backward, on every rank in the same order.
  const TrainResult checkpointed =
      Trainer(job->config(n / 2, "cp_ac", true,
                         {"--parallelism.context_parallel_degree=2", "--activation_checkpoint.mode=full"}),
              log, world)
          .train();
  worst = std::max(worst, testing::expect_one_rank_figures(checkpointed, want, "flux-tiny, cp 2, checkpointed"));
  if (world.rank() == 0)
    std::cout << "flux-tiny cp 2 x dp_shard " << n / 2 << " vs 1 rank: largest relative loss difference " << worst
              << "\n";
}

// A checkpoint saved under context parallelism resumes under it and under FSDP alone as the
// uninterrupted run continues.
TEST(FluxTrain, ContextParallelCheckpointsResumeAcrossLayouts) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n % 2 != 0) GTEST_SKIP() << "context parallelism of 2 needs an even number of ranks";
  const std::optional<FluxJob> job = make_job("flux_train_cp_resume");
  ASSERT_TRUE(job) << kNoPython;
  const testing::ResumeAcrossLayouts c("flux_cp_checkpoints");
  c.fresh();
  const std::vector<std::string> ten = {"--training.steps=10"};
  const testing::OneRankReference want = testing::one_rank_run(job->config(1, "one", false, ten));
  const std::vector<std::string> cp = {"--parallelism.context_parallel_degree=2"};
  auto run = [&](int dp, const std::vector<std::string>& extra) {
    std::ostringstream log;
    return Trainer(job->config(dp, "run", false, testing::join(ten, extra)), log, world).train();
  };
  (void)testing::expect_one_rank_figures(run(n / 2, testing::join(cp, c.save)), want, "flux-tiny, cp 2, saving");
  testing::ResumeAcrossLayouts::expect_second_half(run(n / 2, testing::join(cp, c.resume)), want,
                                                   "saved and resumed under cp 2");
  testing::ResumeAcrossLayouts::expect_second_half(run(n, c.resume), want, "saved under cp 2, resumed under FSDP");
}

// What context parallelism cannot split is refused by key, before anything is built.
TEST(FluxTrain, ContextParallelRefusesWhatItCannotSplit) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() % 2 != 0) GTEST_SKIP() << "context parallelism of 2 needs an even number of ranks";
  const std::optional<FluxJob> job = make_job("flux_train_cp_refused");
  ASSERT_TRUE(job) << kNoPython;
  const int dp = world.size() / 2;
  auto refusal = [&](bool validation, const std::vector<std::string>& extra) {
    std::ostringstream log;
    return testing::error_of([&] {
      Trainer(job->config(dp, "refused", validation, testing::join({"--parallelism.context_parallel_degree=2"}, extra)),
              log, world)
          .train();
    });
  };
  std::string msg = refusal(false, {"--flux.t5_length=6"});
  EXPECT_NE(msg.find("flux.t5_length = 6"), std::string::npos) << msg;
  msg = refusal(false, {"--flux.image_size=24"});
  EXPECT_NE(msg.find("flux.image_size = 24: its 9 image tokens"), std::string::npos) << msg;
}

}  // namespace
}  // namespace titan::train
