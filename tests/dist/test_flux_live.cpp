// FLUX training with the frozen encoders run every step, FSDP over the world's ranks (the
// transformer's weights and the encoders' sharded over dp_shard, each encoder gathered whole for
// its forward), takes the steps one rank takes on the same global batch, validation included.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "support/flux_live_pipeline.h"
#include "support/paths.h"
#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

TEST(FluxLive, ShardedEncodersOverTheRanksTakeOneRanksSteps) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "one rank has nothing to split";
  const fs::path dir = testing::job_dir(0) / "flux_live";
  double made = 0;  // rank 0 makes the data and the pipeline
  if (world.rank() == 0) {
    fs::remove_all(dir);
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                            "/scripts/make_shapes.py' make --count 12 --out '" + (dir / "data").string() + "' > /dev/null";
    made = std::system(cmd.c_str()) == 0 && !test::flux_live_pipeline().empty() ? 1 : 0;
  }
  made = world.all_reduce(made, dist::ReduceOp::sum);
  ASSERT_EQ(made, 1) << "the reference Python (numpy, Pillow, torch, diffusers) did not run: make deps-test";
  const fs::path pipeline = fs::path(TITAN_PARITY_DIR) / "flux_live" / "pipeline";
  const int64_t global_batch = 4;
  auto config = [&](int ranks, const std::string& out) {
    return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/flux/flux_tiny.toml",
                           {"--flux.cache_path=", "--flux.data_path=" + (dir / "data").string(),
                            "--flux.pipeline_path=" + pipeline.string(), "--flux.image_size=32",
                            "--flux.t5_length=8", "--flux.validation_samples=4", "--validation.enable=true",
                            "--validation.freq=3", "--validation.local_batch_size=1", "--training.steps=3",
                            "--training.local_batch_size=" + std::to_string(global_batch / ranks),
                            "--lr_scheduler.warmup_steps=2", "--checkpoint.enable=false", "--metrics.log_freq=100",
                            "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11", "--optimizer.lr=3e-3",
                            "--job.dump_folder=" + (dir / out).string()});
  };
  const testing::OneRankReference want = testing::one_rank_run(config(1, "one"));

  std::ostringstream log;
  const TrainResult all = Trainer(config(n, "all"), log, world).train();
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("the encoders FSDP-sharded over the " + std::to_string(n) + " dp_shard ranks"),
              std::string::npos)
        << log.str();
  }
  const double worst = std::max(testing::expect_one_rank_figures(all, want, "flux-tiny, encoders every step, FSDP"),
                                testing::expect_one_rank_validation(all, want, "flux-tiny, encoders every step, FSDP"));
  if (world.rank() == 0)
    std::cout << "flux-tiny, encoders every step, FSDP on " << n << " ranks vs 1: largest relative loss difference "
              << worst << "\n";
}

}  // namespace
}  // namespace titan::train
