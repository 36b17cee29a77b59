#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/hf_interop.h"
#include "titan/train/trainer.h"

extern char** environ;

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Each test works in a folder of its own (tests may run in parallel) holding a small corpus,
// removed afterwards unless the test failed, to be looked into.
class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir(std::string("resume_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 200; ++i)
      f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  fs::path dir;
};

fs::path folder(const fs::path& dir) {
  return dir / "ckpt";
}

// The debug model on 32 tokens a step, checkpointing into folder(dir) when `extra` enables it.
// debug.toml's [checkpoint] keys are for `make train`: here checkpoints are off and all are kept
// unless a test says otherwise.
std::vector<std::string> overrides(const fs::path& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"--checkpoint.enable=false",
                                "--checkpoint.keep_latest_k=0",
                                "--training.dataset_path=" + (dir / "corpus.txt").string(),
                                "--training.seq_len=16",
                                "--training.local_batch_size=2",
                                "--lr_scheduler.warmup_steps=2",
                                "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false",
                                "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                "--checkpoint.folder=" + folder(dir).string()};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

const std::string kConfigFile = std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml";

JobConfig config(const fs::path& dir, const std::vector<std::string>& extra) {
  return load_job_config(kConfigFile, overrides(dir, extra));
}

TrainResult run(const JobConfig& cfg, std::string* log_out = nullptr) {
  std::ostringstream log;
  TrainResult r = Trainer(cfg, log).train();
  if (log_out) *log_out = log.str();
  return r;
}

std::vector<int64_t> steps_in(const fs::path& f) {
  std::vector<int64_t> out;
  for (const auto& [step, path] : CheckpointManager::list(f)) out.push_back(step);
  return out;
}

std::vector<double> tail(const std::vector<double>& v, size_t from) {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(from), v.end());
}

json metadata(const fs::path& step_dir) {
  std::ifstream in(step_dir / checkpoint::kMetadataFile);
  return json::parse(in);
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

const std::vector<std::string> kEveryTenFull = {"--checkpoint.enable=true", "--checkpoint.interval=10",
                                                "--checkpoint.last_save_model_only=false"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(Resume, TwentyStepsEqualTenThenResumeToTwentyBitForBit) {
  TrainResult straight = run(config(dir, {"--training.steps=20"}));
  ASSERT_EQ(straight.losses.size(), 20u);

  TrainResult with_saves = run(config(dir, with({"--training.steps=20"}, kEveryTenFull)));
  EXPECT_EQ(with_saves.losses, straight.losses) << "saving a checkpoint changed the training";
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{10, 20}));

  std::string log;
  TrainResult resumed =
      run(config(dir, with({"--training.steps=20", "--checkpoint.load_step=10"}, kEveryTenFull)), &log);
  EXPECT_EQ(resumed.resumed_from, 10);
  EXPECT_EQ(resumed.steps_run, 20);
  EXPECT_EQ(resumed.losses, tail(straight.losses, 10));
  EXPECT_EQ(resumed.grad_norms, tail(straight.grad_norms, 10));
  EXPECT_NE(log.find("step-10 (step 10)"), std::string::npos) << log;
  EXPECT_NE(log.find("checkpoint.load_step (-1 -> 10)"), std::string::npos) << log;
}

TEST_F(Resume, ACleanStopSavesAndTheNextRunContinuesFromThere) {
  TrainResult straight = run(config(dir, {"--training.steps=6"}));
  JobConfig cfg =
      config(dir, {"--training.steps=6", "--checkpoint.enable=true", "--checkpoint.interval=100"});
  {
    StopOnSignal guard;
    StopOnSignal::request();
    TrainResult stopped = run(cfg);
    EXPECT_TRUE(stopped.interrupted);
    EXPECT_EQ(stopped.steps_run, 1);
  }
  StopOnSignal::reset();
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{1}));
  EXPECT_FALSE(metadata(folder(dir) / "step-1")["state"]["model_only"].get<bool>());
  TrainResult resumed = run(cfg);
  EXPECT_EQ(resumed.resumed_from, 1);
  EXPECT_EQ(resumed.losses, tail(straight.losses, 1));
}

// The background writer pauses before writing while training goes on and updates the weights
// and moments in place: the checkpoint must still hold the state of the step it was taken at.
TEST_F(Resume, AsyncSaveHoldsTheStateOfItsStep) {
  TrainResult straight = run(config(dir, {"--training.steps=10"}));
  std::vector<std::string> async = {"--training.steps=10", "--checkpoint.enable=true",
                                    "--checkpoint.interval=5", "--checkpoint.last_save_model_only=false",
                                    "--checkpoint.async_mode=async"};
  {
    ScopedEnv slow("TITAN_CHECKPOINT_TEST_DELAY_MS", "300");
    EXPECT_EQ(run(config(dir, async)).losses, straight.losses);
  }
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{5, 10}));
  TrainResult resumed = run(config(dir, with(async, {"--checkpoint.load_step=5"})));
  EXPECT_EQ(resumed.resumed_from, 5);
  EXPECT_EQ(resumed.losses, tail(straight.losses, 5));
}

TEST_F(Resume, KeepsTheLatestKAndResumesFromTheLatestFullCheckpoint) {
  std::vector<std::string> o = {"--checkpoint.enable=true", "--checkpoint.interval=2",
                                "--checkpoint.keep_latest_k=2"};
  TrainResult first = run(config(dir, with({"--training.steps=6"}, o)));
  EXPECT_EQ(first.steps_run, 6);
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{4, 6}));
  json last = metadata(folder(dir) / "step-6"), full = metadata(folder(dir) / "step-4");
  EXPECT_TRUE(last["state"]["model_only"].get<bool>());
  EXPECT_FALSE(full["state"]["model_only"].get<bool>());
  for (const auto& [name, t] : last["tensors"].items()) EXPECT_TRUE(name.starts_with("model.")) << name;
  EXPECT_TRUE(full["tensors"].contains("optimizer.output.weight.exp_avg"));
  EXPECT_EQ(full["state"]["step"], 4);
  EXPECT_EQ(full["state"]["lr_scheduler"]["step"], 4);
  EXPECT_EQ(full["state"]["config"]["training"]["steps"], 6);
  EXPECT_EQ(full["state"]["data"]["index"], 8);  // 4 steps of 2 windows

  // The finished run's final export: its weights are loaded, nothing is left to run.
  TrainResult again = run(config(dir, with({"--training.steps=6"}, o)));
  EXPECT_EQ(again.resumed_from, 6);
  EXPECT_TRUE(again.losses.empty());

  // With more steps the export is no place to resume from; the latest full checkpoint is.
  std::string log;
  TrainResult longer = run(config(dir, with({"--training.steps=8"}, o)), &log);
  EXPECT_EQ(longer.resumed_from, 4);
  EXPECT_EQ(longer.losses.size(), 4u);
  EXPECT_NE(log.find("skipping"), std::string::npos) << log;
  EXPECT_TITAN_ERROR(run(config(dir, with({"--training.steps=8", "--checkpoint.load_step=3"}, o))),
                     "checkpoint.load_step = 3", "holds steps [", "pick one of them");
}

TEST_F(Resume, ModelOnlyExportInBf16SeedsAnotherRun) {
  run(config(dir, {"--training.steps=4", "--checkpoint.enable=true", "--checkpoint.export_dtype=bfloat16"}));
  fs::path exported = folder(dir) / "step-4";
  // Bound to a name: ranging over items() of a temporary would read freed memory.
  nlohmann::json tensors = metadata(exported)["tensors"];
  for (const auto& [name, t] : tensors.items()) EXPECT_EQ(t["dtype"], "BF16") << name;
  EXPECT_TITAN_ERROR(
      run(config(dir, {"--training.steps=8", "--checkpoint.enable=true", "--checkpoint.load_step=4"})),
      "model-only export", "initial_load_path");

  TrainResult fresh = run(config(dir, {"--training.steps=2"}));
  fs::path other = dir / "other";
  std::vector<std::string> seeded = {"--training.steps=2", "--checkpoint.enable=true",
                                     "--checkpoint.folder=" + other.string(),
                                     "--checkpoint.initial_load_path=" + exported.string()};
  TrainResult from_export = run(config(dir, seeded));
  EXPECT_EQ(from_export.resumed_from, 0);
  EXPECT_LT(from_export.losses[0], fresh.losses[0]) << "the exported weights were not loaded";

  // Without initial_load_model_only the whole state comes along, the step included.
  fs::remove_all(other);
  run(config(dir, with({"--training.steps=6"}, kEveryTenFull)));  // full step-6 in folder(dir)
  std::vector<std::string> whole = {"--training.steps=8", "--checkpoint.enable=true",
                                    "--checkpoint.folder=" + other.string(),
                                    "--checkpoint.initial_load_path=" + (folder(dir) / "step-6").string(),
                                    "--checkpoint.initial_load_model_only=false"};
  EXPECT_EQ(run(config(dir, whole)).resumed_from, 6);
}

TEST_F(Resume, DamagedOrForeignCheckpointsAreClearErrors) {
  std::vector<std::string> o = {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.interval=1",
                                "--checkpoint.last_save_model_only=false"};
  run(config(dir, o));
  fs::path latest = folder(dir) / "step-2";
  std::string shard = metadata(latest)["files"].begin().key();

  // A foreign config: another vocabulary gives other embedding and output shapes.
  EXPECT_TITAN_ERROR(run(config(dir, with(o, {"--model.vocab_size=3000"}))), latest.string(), "does not fit",
                     "tensor 'model.tok_embeddings.weight': expected f32[3000,");
  EXPECT_TITAN_ERROR(run(config(dir, with(o, {"--training.seed=3"}))), "training.seed = 0",
                     "--training.seed=0");

  json good = metadata(latest), evil = good;
  evil["files"]["../../x.safetensors"] = evil["files"][shard];
  evil["files"].erase(shard);
  for (auto& [name, t] : evil["tensors"].items()) t["shards"][0]["file"] = "../../x.safetensors";
  std::ofstream(latest / checkpoint::kMetadataFile, std::ios::trunc) << evil.dump();
  EXPECT_TITAN_ERROR(run(config(dir, o)), "\"../../x.safetensors\"", "not a plain file name");
  std::ofstream(latest / checkpoint::kMetadataFile, std::ios::trunc) << good.dump();

  {
    std::fstream f(latest / shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x55');
  }
  EXPECT_TITAN_ERROR(run(config(dir, o)), shard, "CRC-32C");
  fs::resize_file(latest / shard, 1000);
  EXPECT_TITAN_ERROR(run(config(dir, o)), shard, "truncated");
  // The damaged step is named, so another can be picked.
  EXPECT_EQ(run(config(dir, with(o, {"--checkpoint.load_step=1"}))).resumed_from, 1);
}

// ---- a real process killed by SIGKILL ---------------------------------------------------------

// Starts `titan train` with `args`, output to `log`; `delay_ms`, when given, slows every save.
pid_t spawn_titan(const std::vector<std::string>& args, const fs::path& log, const std::string& delay_ms) {
  std::vector<std::string> argv_s = {TITAN_CLI, "train", "--config", kConfigFile};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (!std::string(*e).starts_with("TITAN_CHECKPOINT_TEST_DELAY_MS=")) env_s.push_back(*e);
  if (!delay_ms.empty()) env_s.push_back("TITAN_CHECKPOINT_TEST_DELAY_MS=" + delay_ms);
  std::vector<char*> argv, envp;
  for (std::string& s : argv_s) argv.push_back(s.data());
  for (std::string& s : env_s) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, TITAN_CLI, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << TITAN_CLI;
  return pid;
}

// SIGKILL, then the exit status; true when the signal, not an exit, ended the process.
bool kill_now(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(Resume, KilledDuringASaveResumesFromTheLastCompleteCheckpoint) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  std::vector<std::string> o =
      overrides(dir, {"--training.steps=6", "--checkpoint.enable=true", "--checkpoint.interval=1",
                      "--checkpoint.last_save_model_only=false"});
  const fs::path staging = checkpoint::staging_dir(folder(dir) / "step-3");
  // Every save pauses 1 s in its staging folder; steps 1 and 2 complete, step 3's is killed.
  pid_t pid = spawn_titan(o, dir / "child.log", "1000");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(staging) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const bool saving = fs::exists(staging);
  EXPECT_TRUE(kill_now(pid)) << "titan train ended before it was killed:\n" << read_file(dir / "child.log");
  ASSERT_TRUE(saving) << "no save of step 3 began within 120 s:\n" << read_file(dir / "child.log");
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{1, 2}));

  std::string log;
  TrainResult resumed = run(load_job_config(kConfigFile, o), &log);
  EXPECT_EQ(resumed.resumed_from, 2);
  EXPECT_NE(log.find("interrupted save"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(staging));
  TrainResult straight = run(config(dir, {"--training.steps=6"}));
  EXPECT_EQ(resumed.losses, tail(straight.losses, 2));
}

// Kills at arbitrary moments — loading, training, writing, renaming, pruning — never leave the
// newest complete checkpoint unloadable, and the run still ends where an unbroken one does.
TEST_F(Resume, KillsAtRandomMomentsNeverLoseTheLastCompleteCheckpoint) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  std::vector<std::string> o =
      overrides(dir, {"--training.steps=10", "--checkpoint.enable=true", "--checkpoint.interval=1",
                      "--checkpoint.last_save_model_only=false", "--checkpoint.keep_latest_k=2"});
  std::mt19937 random(2024);
  int64_t latest = 0;
  for (int round = 0; round < 5; ++round) {
    pid_t pid = spawn_titan(o, dir / "child.log", "");
    // Once the child has saved a step, it is somewhere in the next step or save.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto newest = [&] {
      std::vector<int64_t> steps = steps_in(folder(dir));
      return steps.empty() ? int64_t{0} : steps.back();
    };
    while (newest() <= latest && newest() < 10 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 250)(random)));
    kill_now(pid);
    std::vector<int64_t> steps = steps_in(folder(dir));
    int64_t now = steps.empty() ? 0 : steps.back();
    EXPECT_TRUE(now > latest || now == 10)
        << "round " << round << ": step " << now << " after " << latest
        << ": no progress, or the newest complete checkpoint went backwards";
    latest = now;
    EXPECT_LE(steps.size(), 3u) << "round " << round << ": keep_latest_k = 2 leaves at most one more behind";
  }
  TrainResult resumed = run(load_job_config(kConfigFile, o));
  EXPECT_EQ(resumed.resumed_from, latest);
  TrainResult straight = run(config(dir, {"--training.steps=10"}));
  EXPECT_EQ(resumed.losses, tail(straight.losses, static_cast<size_t>(latest)));
}

// ---- Hugging Face export and import -------------------------------------------------------------

TEST_F(Resume, FinalSaveInHfHoldsTheTrainedWeightsAndSeedsAnotherRun) {
  const std::vector<std::string> o = {"--training.steps=3", "--checkpoint.enable=true"};
  run(config(dir, o));
  const fs::path titan_export = dir / "titan-export";
  fs::rename(folder(dir) / "step-3", titan_export);
  std::string log;
  run(config(dir, with(o, {"--checkpoint.last_save_in_hf=true"})), &log);
  const fs::path hf = folder(dir) / "step-3";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf)) << log;
  EXPECT_NE(log.find("step-3 (Hugging Face"), std::string::npos) << log;
  EXPECT_EQ(steps_in(folder(dir)), (std::vector<int64_t>{3}));
  // The same run trained the same weights: HF's names and layouts, turned back, bit for bit.
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(hf), std::nullopt), test::titan_checkpoint_weights(titan_export));

  TrainResult again = run(config(dir, with(o, {"--checkpoint.last_save_in_hf=true"})));
  EXPECT_EQ(again.resumed_from, 3) << "a finished run's HF export leaves nothing to run";
  EXPECT_TRUE(again.losses.empty());

  auto seeded = [&](const fs::path& from, const std::string& sub) {
    return run(config(
        dir, {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / sub).string(),
              "--checkpoint.initial_load_path=" + from.string()}));
  };
  TrainResult from_hf = seeded(hf, "from-hf"), from_titan = seeded(titan_export, "from-titan");
  EXPECT_EQ(from_hf.resumed_from, 0);
  EXPECT_EQ(from_hf.losses, from_titan.losses) << "the HF export seeds a run as the titan export does";
}

TEST_F(Resume, HfFolderOfAnotherModelIsAClearError) {
  run(config(dir, {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.last_save_in_hf=true"}));
  const fs::path hf = folder(dir) / "step-2";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf));
  EXPECT_TITAN_ERROR(
      run(config(dir, {"--training.steps=4", "--checkpoint.enable=true", "--checkpoint.load_step=2"})),
      "is a Hugging Face export", "nothing to resume from");
  auto start_from = [&](const std::vector<std::string>& extra) {
    return config(dir, with({"--training.steps=2", "--checkpoint.enable=true",
                             "--checkpoint.folder=" + (dir / "other").string(),
                             "--checkpoint.initial_load_path=" + hf.string()},
                            extra));
  };
  EXPECT_TITAN_ERROR(run(start_from({"--model.vocab_size=3000"})), hf.string(),
                     "holds llama3 flavor debugmodel with vocab_size 2048",
                     "this run builds flavor debugmodel with vocab_size 3000", "--model.vocab_size=2048");
  EXPECT_TITAN_ERROR(run(start_from({"--checkpoint.initial_load_model_only=false"})),
                     "is a Hugging Face model folder", "initial_load_model_only = true");
  json config_json = json::parse(std::ifstream(hf / "config.json"));
  config_json["num_hidden_layers"] = 5;
  std::ofstream(hf / "config.json", std::ios::trunc) << config_json.dump();
  EXPECT_TITAN_ERROR(run(start_from({})), hf.string(), "describes no llama3 flavor",
                     "num_hidden_layers (config.json 5, debugmodel 6)");
}

TEST_F(Resume, ConvertCommandExportsAFullCheckpointAndImportsItBack) {
  ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
  run(config(dir,
             {"--training.steps=2", "--checkpoint.enable=true", "--checkpoint.last_save_model_only=false"}));
  const fs::path step = folder(dir) / "step-2", hf = dir / "hf", back = dir / "back",
                 log = dir / "convert.log";
  auto convert = [&](const std::string& args) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "'" + std::string.
    std::string cmd = "'";
    cmd += TITAN_CLI;
    cmd += "' convert " + args + " > '" + log.string() + "' 2>&1";
    return std::system(cmd.c_str());
  };
  ASSERT_EQ(
      convert("--to hf --checkpoint '" + step.string() + "' --out '" + hf.string() + "' --dtype bfloat16"), 0)
      << read_file(log);
  EXPECT_NE(read_file(log).find("(Hugging Face, bfloat16, transformers5)"), std::string::npos)
      << read_file(log);
  const json v5 = json::parse(std::ifstream(hf / "config.json"));
  EXPECT_EQ(v5.value("dtype", json()), "bfloat16");
  EXPECT_FALSE(v5.contains("rope_theta"));
  // transformers 4's layout on request: the same RoPE, in its keys only.
  ASSERT_EQ(convert("--to hf --checkpoint '" + step.string() + "' --out '" + (dir / "hf4").string() +
                    "' --hf-config-format transformers4"),
            0)
      << read_file(log);
  const json v4 = json::parse(std::ifstream(dir / "hf4" / "config.json"));
  EXPECT_EQ(v4.value("rope_theta", json()), v5["rope_parameters"]["rope_theta"]);
  EXPECT_EQ(v4.value("torch_dtype", json()), "float32");
  EXPECT_FALSE(v4.contains("rope_parameters"));
  EXPECT_FALSE(v4.contains("dtype"));
  ASSERT_EQ(convert("--to titan --hf '" + hf.string() + "' --out '" + back.string() + "'"), 0)
      << read_file(log);
  // The optimizer state stays behind; the weights went through bf16 once.
  nn::StateDict rounded;
  for (const auto& [name, t] : test::titan_checkpoint_weights(step)) rounded.emplace(name, t.to(kBF16));
  test::expect_same_state(test::titan_checkpoint_weights(back), rounded);
  EXPECT_EQ(checkpoint::read_metadata(back).tensors.size(), rounded.size());

  EXPECT_NE(convert("--to hf --checkpoint '" + step.string() + "'"), 0);
  EXPECT_NE(read_file(log).find("no --out given"), std::string::npos) << read_file(log);
  EXPECT_NE(convert("--to titan --hf '" + hf.string() + "' --out x --dtype bfloat16"), 0);
  EXPECT_NE(read_file(log).find("--dtype does not apply"), std::string::npos) << read_file(log);
  EXPECT_NE(convert("--to hf --checkpoint '" + step.string() + "' --out x --hf-config-format transformers3"),
            0);
  EXPECT_NE(read_file(log).find("--hf-config-format is \"transformers3\""), std::string::npos)
      << read_file(log);
  EXPECT_NE(convert("--to titan --hf '" + hf.string() + "' --out x --hf-config-format transformers4"), 0);
  EXPECT_NE(read_file(log).find("--hf-config-format does not apply"), std::string::npos) << read_file(log);
}

}  // namespace
}  // namespace titan::train
