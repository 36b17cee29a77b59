// FLUX training under FSDP over the world's ranks takes the steps one rank takes on the same
// global batch: the same samples, noise, t and prompt dropout (drawn per global sample slot,
// train/flux/flux_batches.h), so losses and validation losses agree to rounding.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "support/paths.h"
#include "support/synthetic_flux_cache.h"
#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

TEST(FluxTrain, FsdpOverTheRanksTakesOneRanksStepsOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path dir = testing::job_dir(0) / "flux_train";
  if (world.rank() == 0) {
    fs::remove_all(dir);
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                            "/scripts/make_shapes.py' make --count 12 --out '" + (dir / "data").string() + "' > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << ": the reference Python (numpy, Pillow) did not run";
    test::write_synthetic_cache(dir / "data", dir / "cache", {});
  }
  world.barrier().wait();
  const int64_t global_batch = 4;
  auto config = [&](int ranks, const std::string& out) {
    return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml",
                           {"--flux.cache_path=" + (dir / "cache").string(), "--flux.image_size=32",
                            "--flux.t5_length=8", "--flux.validation_samples=4", "--validation.enable=true",
                            "--validation.freq=3", "--validation.local_batch_size=2", "--training.steps=6",
                            "--training.local_batch_size=" + std::to_string(global_batch / ranks),
                            "--lr_scheduler.warmup_steps=2", "--checkpoint.enable=false", "--metrics.log_freq=100",
                            "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                            "--job.dump_folder=" + (dir / out).string()});
  };
  const testing::OneRankReference want = testing::one_rank_run(config(1, "one"));

  std::ostringstream log;
  const TrainResult all = Trainer(config(n, "all"), log, world).train();
  // Only world rank 0 writes the log.
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("dp_shard " + std::to_string(n)), std::string::npos) << log.str();
  }
  const double worst = std::max(testing::expect_one_rank_figures(all, want, "flux-tiny, FSDP"),
                                testing::expect_one_rank_validation(all, want, "flux-tiny, FSDP"));
  if (world.rank() == 0)
    std::cout << "flux-tiny FSDP on " << n << " ranks vs 1: largest relative loss difference " << worst << "\n";
}

}  // namespace
}  // namespace titan::train
