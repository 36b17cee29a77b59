// `titan generate` as a user runs it: on a checkpoint that a short training run writes first, and
// with the inputs it refuses.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Each test has a folder of its own: ctest runs them in parallel processes.
class GenerateCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir(std::string("generate_command_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Trains the debug model for 2 steps of 2 x 16 tokens; returns the checkpoint folder, which
  // holds the final export as step-2.
  fs::path train_checkpoint() const {
    {
      std::ofstream f(dir_ / "corpus.txt");
      for (int i = 0; i < 100; ++i)
        f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
    }
    train::JobConfig cfg = train::load_job_config(
        std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml",
        {"--training.dataset_path=" + (dir_ / "corpus.txt").string(), "--training.seq_len=16",
         "--training.local_batch_size=2", "--training.steps=2", "--lr_scheduler.warmup_steps=1",
         "--metrics.enable_jsonl=false", "--metrics.peak_flops=1e11", "--job.dump_folder=" + dir_.string(),
         "--checkpoint.enable=true", "--checkpoint.folder=ckpt",
         // Bytes, so that the prompt lengths below are known exactly.
         "--model.tokenizer_path="});
    std::ostringstream log;
    train::Trainer(cfg, log).train();
    return dir_ / "ckpt";
  }

  // Runs `titan generate` with `args` (each quoted for the shell).
  CliRun generate(const std::vector<std::string>& args) const {
    std::string cmd = std::string(TITAN_CLI) + " generate";
    for (const std::string& a : args) cmd += " '" + a + "'";
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const int status = std::system((cmd + " >" + out.string() + " 2>" + err.string()).c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }

  fs::path dir_;
};

TEST_F(GenerateCommand, PrintsTheContinuationAndTokensPerSecond) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  const fs::path folder = train_checkpoint();
  CliRun r = generate(
      {"--checkpoint", folder.string(), "--prompt", "In the", "--max-new-tokens", "12", "--seed", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("In the")) << r.out;
  EXPECT_GT(r.out.size(), std::string("In the\n").size()) << "no continuation: " << r.out;
  EXPECT_NE(r.err.find("loaded " + (folder / "step-2").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("byte tokenizer (259 ids)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;

  // The step folder itself, with the same seed: the same text.
  CliRun again = generate({"--checkpoint", (folder / "step-2").string(), "--prompt", "In the",
                           "--max-new-tokens", "12", "--seed", "1"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.out, r.out);

  // 20 bytes and bos: more than the 16 positions the model was trained with.
  CliRun long_prompt = generate({"--checkpoint", folder.string(), "--prompt", "twenty bytes of text"});
  EXPECT_EQ(long_prompt.rc, 1);
  EXPECT_NE(long_prompt.err.find("context of 16"), std::string::npos) << long_prompt.err;
}

// Each of these is refused before a model is built (the sampling options before the checkpoint
// is looked for).
TEST_F(GenerateCommand, BadInputsAreClearErrors) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  CliRun r = generate({"--checkpoint", (dir_ / "missing").string(), "--prompt", "x"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;

  fs::create_directories(dir_ / "empty");
  r = generate({"--checkpoint", (dir_ / "empty").string(), "--prompt", "x"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("holds no complete checkpoint"), std::string::npos) << r.err;

  r = generate({"--checkpoint", (dir_ / "missing").string(), "--prompt", "x", "--top-p", "2"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("top_p = 2"), std::string::npos) << r.err;

  r = generate({"--checkpoint", (dir_ / "missing").string(), "--prompt", "x", "--top-k", "many"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--top-k wants a whole number, got 'many'"), std::string::npos) << r.err;

  r = generate({"--prompt", "x"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("needs --checkpoint and --prompt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace titan
