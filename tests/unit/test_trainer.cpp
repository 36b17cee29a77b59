#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

// A small debugmodel run on a small text, fast enough for a unit test.
JobConfig small_config(const std::vector<std::string>& overrides = {}) {
  fs::path dir = fs::temp_directory_path() / "titan_trainer_test";
  fs::create_directories(dir);
  fs::path text = dir / "corpus.txt";
  if (!fs::exists(text)) {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  std::vector<std::string> o = {"--training.dataset_path=" + text.string(), "--training.seq_len=32",
                                "--training.local_batch_size=4", "--training.steps=4",
                                "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                // Every run starts afresh: none resumes from the one before.
                                "--checkpoint.enable=false"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", o);
}

TrainResult run(const JobConfig& cfg) {
  std::ostringstream log;
  Trainer t(cfg, log);
  return t.train();
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
  TrainResult a = run(small_config()), b = run(small_config());
  ASSERT_EQ(a.losses.size(), 4u);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  TrainResult c = run(small_config({"--training.seed=1"}));
  EXPECT_NE(a.losses, c.losses);
}

TEST(Trainer, LossFalls) {
  TrainResult r = run(small_config({"--training.steps=12", "--optimizer.lr=3e-3"}));
  EXPECT_LT(r.losses.back(), r.losses.front() * 0.7) << r.losses.front() << " -> " << r.losses.back();
}

TEST(Trainer, GradientAccumulationMatchesOneLargeBatch) {
  // 2 micro-batches of 2 windows read the same 4 windows, in the same order, as 1 batch of 4.
  TrainResult whole = run(small_config({"--training.local_batch_size=4"}));
  TrainResult split = run(small_config({"--training.local_batch_size=2", "--training.gradient_accumulation_steps=2"}));
  ASSERT_EQ(whole.losses.size(), split.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i) EXPECT_NEAR(split.losses[i], whole.losses[i], 1e-5 * whole.losses[i]);
}

TEST(Trainer, ActivationCheckpointingGivesIdenticalLosses) {
  TrainResult none = run(small_config());
  EXPECT_EQ(run(small_config({"--activation_checkpoint.mode=full"})).losses, none.losses);
  EXPECT_EQ(run(small_config({"--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=2"})).losses,
            none.losses);
}

TEST(Trainer, StopRequestEndsAfterTheCurrentStep) {
  StopOnSignal guard;
  StopOnSignal::request();
  TrainResult r = run(small_config());
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.steps_run, 1);
  StopOnSignal::reset();
}

TEST(Trainer, SigintAndSigtermRequestAStop) {
  for (int sig : {SIGINT, SIGTERM}) {
    StopOnSignal guard;
    EXPECT_FALSE(StopOnSignal::requested());
    std::raise(sig);
    EXPECT_TRUE(StopOnSignal::requested());
  }
}

TEST(Trainer, MissingDatasetIsAClearError) {
  EXPECT_TITAN_ERROR(run(small_config({"--training.dataset_path=/nonexistent/corpus.txt"})), "training.dataset_path",
                     "/nonexistent/corpus.txt");
}

}  // namespace
}  // namespace titan::train
