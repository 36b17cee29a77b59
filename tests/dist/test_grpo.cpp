// GRPO over data-parallel ranks (FSDP, and DDP) matches one rank taking the same steps: the same
// prompts (split over the ranks), the same rollouts (seeded by their place in the step), the same
// loss over the global count of valid tokens; and a resumed run continues the uninterrupted one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/dist/process_group.h"
#include "titan/rl/grpo_engine.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

using namespace testing;

constexpr int64_t kGrpoSteps = 3;

// Addition prompts in this rank's job folder, and a GRPO job over them on a one-layer byte model.
// A random model starts completions with a digit now and then: the regex reward mixes groups.
JobConfig grpo_job(const std::string& name, const std::vector<std::string>& overrides) {
  const fs::path dir = job_dir(dist::world().rank()) / ("grpo_" + name);
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "prompts.jsonl");
    for (int i = 0; i < 16; ++i)
      f << "{\"prompt\": \"" << i << "+" << 3 * i << "=\", \"answer\": \"" << 4 * i << "\"}\n";
  }
  std::vector<std::string> o = {"--training.objective=grpo",
                                "--grpo.prompts_path=" + (dir / "prompts.jsonl").string(),
                                "--model.tokenizer_path=",
                                "--model.vocab_size=259",
                                "--model.n_layers=1",
                                "--training.seq_len=24",
                                "--training.local_batch_size=4",
                                "--training.steps=" + std::to_string(kGrpoSteps),
                                "--optimizer.lr=3e-3",
                                "--lr_scheduler.warmup_steps=0",
                                "--grpo.prompts_per_step=8",
                                "--grpo.group_size=4",
                                "--grpo.max_new_tokens=6",
                                "--grpo.reward_kind=regex",
                                "--grpo.reward_pattern=[0-9]",
                                "--grpo.temperature=1.5",
                                "--grpo.mini_batches=2",
                                "--training.seed=2",
                                "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false",
                                "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (job_dir(0) / ("grpo_" + name) / "out").string(),
                                "--comm.timeout_seconds=60"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return parse_job_config("[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n", name + ".toml", o);
}

TrainResult run(const JobConfig& cfg, dist::ProcessGroup world) {
  std::ostringstream log;
  return Trainer(cfg, log, std::move(world), rl::objective_engine(cfg)).train();
}

// Rank 0's losses and gradient norms training alone, handed to every rank.
std::pair<std::vector<double>, std::vector<double>> one_rank(const JobConfig& cfg) {
  dist::ProcessGroup& world = dist::world();
  Tensor figures = Tensor::zeros({2, kGrpoSteps}, {.dtype = kF64});
  if (world.rank() == 0) {
    const TrainResult one = run(cfg, dist::ProcessGroup::single());
    EXPECT_EQ(one.losses.size(), static_cast<size_t>(kGrpoSteps));
    for (size_t i = 0; i < std::min<size_t>(one.losses.size(), kGrpoSteps); ++i) {
      figures.data<double>()[i] = one.losses[i];
      figures.data<double>()[kGrpoSteps + static_cast<int64_t>(i)] = one.grad_norms[i];
    }
  }
  world.broadcast(figures, 0).wait();
  const std::vector<double> all = figures.to_vector<double>();
  return {{all.begin(), all.begin() + kGrpoSteps}, {all.begin() + kGrpoSteps, all.end()}};
}

void expect_as_one_rank(const TrainResult& got,
                        const std::pair<std::vector<double>, std::vector<double>>& want,
                        const std::string& what) {
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kGrpoSteps)) << what;
  double moved = 0;
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.first[i], 1e-5) << what << ", step " << i + 1;
    EXPECT_NEAR(got.grad_norms[i], want.second[i], 1e-4 * std::max(1.0, want.second[i]))
        << what << ", step " << i + 1;
    moved = std::max(moved, want.second[i]);
  }
  EXPECT_GT(moved, 0.0) << "no step had a group of mixed rewards: the comparison shows nothing";
}

TEST(Grpo, FsdpAndDdpMatchOneRank) {
  const int n = dist::world().size();
  if (8 % (2 * n) != 0) GTEST_SKIP() << "a step's 8 prompts split into 2 mini-batches over 1, 2 or 4 ranks";
  const auto want = one_rank(grpo_job("one", {}));
  expect_as_one_rank(run(grpo_job("fsdp", {}), dist::world()), want,
                     "FSDP over " + std::to_string(n) + " ranks");
  expect_as_one_rank(run(grpo_job("ddp", {"--parallelism.data_parallel_replicate_degree=" + std::to_string(n),
                                          "--parallelism.data_parallel_shard_degree=1"}),
                         dist::world()),
                     want, "DDP over " + std::to_string(n) + " ranks");
}

TEST(Grpo, ResumedRunContinuesTheUninterruptedOne) {
  // Every step saved; then the saves after step 1 removed, so that the same job resumes there.
  const JobConfig cfg =
      grpo_job("resume", {"--checkpoint.enable", "--checkpoint.interval=1", "--checkpoint.keep_latest_k=0"});
  const TrainResult straight = run(cfg, dist::world());
  dist::ProcessGroup& world = dist::world();
  if (world.rank() == 0)
    for (int64_t step = 2; step <= kGrpoSteps; ++step)
      fs::remove_all(fs::path(cfg.job.dump_folder) / cfg.checkpoint.folder /
                     ("step-" + std::to_string(step)));
  world.barrier().wait();
  const TrainResult resumed = run(cfg, world);
  ASSERT_EQ(resumed.resumed_from, 1);
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kGrpoSteps - 1));
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i], straight.losses[i + 1]) << "step " << i + 2;
    EXPECT_EQ(resumed.grad_norms[i], straight.grad_norms[i + 1]) << "step " << i + 2;
  }
}

}  // namespace
}  // namespace titan::train
