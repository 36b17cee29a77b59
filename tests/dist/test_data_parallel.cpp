// Data-parallel training on however many ranks the test runs matches one rank training on the
// same global batch, and the trainer rejects layouts it cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "titan/dist/process_group.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

using namespace testing;

TEST(DataParallel, LossesMatchOneRankOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  ASSERT_EQ(kGlobalBatch % n, 0) << "run on 1, 2, 4 or 8 ranks";
  // Rank 0 trains alone on the whole global batch; the others receive its losses.
  Tensor reference = Tensor::zeros({2, kSteps}, {.dtype = kF64});
  if (world.rank() == 0) {
    std::ostringstream log;
    TrainResult one = Trainer(small_config({local_batch(1)}), log, dist::ProcessGroup::single()).train();
    ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
    std::copy(one.losses.begin(), one.losses.end(), reference.data<double>());
    std::copy(one.grad_norms.begin(), one.grad_norms.end(), reference.data<double>() + kSteps);
  }
  world.broadcast(reference, 0).wait();

  std::ostringstream log;
  Trainer trainer(small_config({local_batch(n), "--parallelism.data_parallel_replicate_degree=" + std::to_string(n),
                                "--parallelism.data_parallel_shard_degree=1"}),
                  log, world);
  TrainResult all = trainer.train();
  ASSERT_EQ(all.losses.size(), static_cast<size_t>(kSteps));
  const std::vector<double> want = reference.to_vector<double>();
  double worst = 0;
  for (int64_t i = 0; i < kSteps; ++i) {
    worst = std::max(worst, std::abs(all.losses[i] - want[i]) / want[i]);
    EXPECT_NEAR(all.losses[i], want[i], 1e-5 * want[i]) << "step " << i + 1 << " on " << n << " ranks";
    EXPECT_NEAR(all.grad_norms[i], want[kSteps + i], 1e-4 * want[kSteps + i]) << "step " << i + 1;
  }
  if (world.rank() == 0)
    std::cout << n << " ranks vs 1: largest relative loss difference over " << kSteps << " steps " << worst << "\n";
  // Replicas stay identical: every rank took the same steps.
  EXPECT_DOUBLE_EQ(world.all_reduce(all.losses.back(), dist::ReduceOp::max),
                   world.all_reduce(all.losses.back(), dist::ReduceOp::avg));
  if (world.rank() != 0) {
    EXPECT_EQ(log.str(), "") << "only rank 0 logs";
  } else if (n > 1) {
    EXPECT_NE(log.str().find("data parallel with replicated parameters"), std::string::npos) << log.str();
  }
}

TEST(DataParallel, ResumesFromRankZerosCheckpoint) {
  // Rank 0 writes, every rank reads: the job folder is shared (rank 0's).
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  const fs::path shared = job_dir(0) / "resume";
  if (world.rank() == 0) fs::remove_all(shared);
  world.barrier().wait();
  auto config = [&](int64_t steps, const std::string& dump) {
    return small_config({local_batch(n), "--parallelism.data_parallel_replicate_degree=" + std::to_string(n),
                         "--parallelism.data_parallel_shard_degree=1", "--training.steps=" + std::to_string(steps),
                         "--job.dump_folder=" + dump,
                         "--checkpoint.enable=true", "--checkpoint.interval=3",
                         "--checkpoint.last_save_model_only=false"});
  };
  std::ostringstream log;
  TrainResult straight = Trainer(config(6, (shared / "straight").string()), log, world).train();
  Trainer(config(3, (shared / "split").string()), log, world).train();
  TrainResult resumed = Trainer(config(6, (shared / "split").string()), log, world).train();
  EXPECT_EQ(resumed.resumed_from, 3);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[3 + i]) << "step " << 4 + i;
}

std::string trainer_error(const std::vector<std::string>& overrides,
                          const std::string& config = "configs/llama3/debug.toml") {
  try {
    std::ostringstream log;
    Trainer t(small_config(overrides, config), log, dist::world());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DataParallel, TrainerRejectsLayoutsItCannotRun) {
  const int n = dist::world().size();
  EXPECT_NE(trainer_error({"--parallelism.data_parallel_replicate_degree=" + std::to_string(n),
                           "--parallelism.data_parallel_shard_degree=2", local_batch(2 * n)})
                .find("needs " + std::to_string(2 * n) + " ranks"),
            std::string::npos);
  // Parallelisms titan does not have are refused by their keys, before the layout is resolved.
  const std::string refused = trainer_error({"--parallelism.pipeline_parallel_degree=" + std::to_string(n + 1),
                                             "--parallelism.data_parallel_shard_degree=1", local_batch(1)});
  EXPECT_NE(refused.find("[parallelism] asks for what titan cannot do yet"), std::string::npos) << refused;
  EXPECT_NE(refused.find("parallelism.pipeline_parallel_degree = " + std::to_string(n + 1) + ": set it to 1"),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace titan::train
