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

// Rank 0's values on every rank.
std::vector<double> from_rank_0(std::vector<double> v) {
  dist::ProcessGroup& world = dist::world();
  const auto n = static_cast<int64_t>(world.all_reduce(static_cast<double>(v.size()), dist::ReduceOp::max));
  v.resize(static_cast<size_t>(n), 0.0);
  for (double& x : v) x = world.all_reduce(world.rank() == 0 ? x : 0.0, dist::ReduceOp::sum);
  return v;
}

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
  TrainResult one;
  if (world.rank() == 0) {
    std::ostringstream log;
    one = Trainer(config(1, "one"), log, dist::ProcessGroup::single()).train();
  }
  std::vector<double> one_validation;
  for (const ValidationMetrics& v : one.validations) one_validation.push_back(v.loss);
  const std::vector<double> want = from_rank_0(one.losses), want_validation = from_rank_0(one_validation);

  std::ostringstream log;
  const TrainResult all = Trainer(config(n, "all"), log, world).train();
  if (world.rank() == 0) {
    EXPECT_NE(log.str().find("the encoders FSDP-sharded over the " + std::to_string(n) + " dp_shard ranks"),
              std::string::npos)
        << log.str();
  }
  ASSERT_EQ(all.losses.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(all.losses[i] - want[i]) / want[i]);
    EXPECT_NEAR(all.losses[i], want[i], 1e-5 * want[i]) << "step " << i + 1;
  }
  ASSERT_EQ(all.validations.size(), want_validation.size());
  for (size_t i = 0; i < want_validation.size(); ++i) {
    worst = std::max(worst, std::abs(all.validations[i].loss - want_validation[i]) / want_validation[i]);
    EXPECT_NEAR(all.validations[i].loss, want_validation[i], 1e-5 * want_validation[i]) << "validation " << i;
  }
  if (world.rank() == 0)
    std::cout << "flux-tiny, encoders every step, FSDP on " << n << " ranks vs 1: largest relative loss difference "
              << worst << "\n";
}

}  // namespace
}  // namespace titan::train
