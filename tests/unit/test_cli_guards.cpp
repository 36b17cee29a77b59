// What `titan train`, `titan convert` and `titan generate` refuse or report instead of losing
// data or running something other than what was asked: an --out that holds other files, a
// checkpoint folder another run holds or that cannot be written, a config that is no file or
// names no model, a step folder skipped on resume; the exit status of an interrupted run; and an
// error printed while a progress bar is drawn.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/test_util.h"
#include "titan/core/file_lock.h"
#include "titan/models/registry.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/hf_interop.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

using test::CliRun;
using test::slurp;

class CliGuards : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(TITAN_CLI)) << TITAN_CLI << " is missing; build the titan_cli target";
    dir_ = test::fresh_temp_dir(std::string("cli_guards_") +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ofstream f(dir_ / "corpus.txt");
    for (int i = 0; i < 100; ++i)
      f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // `titan ARGS`, each argument quoted, from the source tree (where data/ is).
  CliRun titan(const std::vector<std::string>& args) const { return test::run_titan(args, dir_); }

  // `titan train` of the llama3 debug model on the test's corpus, 2 x 16 tokens a step,
  // checkpointing into dir_/ckpt; `extra` adds or overrides keys.
  std::vector<std::string> train_args(const std::vector<std::string>& extra) const {
    std::vector<std::string> a = {"train",
                                  "--config",
                                  "configs/llama3/debug.toml",
                                  "--training.dataset_path=" + (dir_ / "corpus.txt").string(),
                                  "--training.seq_len=16",
                                  "--training.local_batch_size=2",
                                  "--training.steps=2",
                                  "--lr_scheduler.warmup_steps=1",
                                  "--metrics.enable_jsonl=false",
                                  "--metrics.peak_flops=1e11",
                                  "--job.dump_folder=" + dir_.string(),
                                  "--checkpoint.enable=true",
                                  "--checkpoint.folder=ckpt"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  CliRun train(const std::vector<std::string>& extra = {}) const { return titan(train_args(extra)); }

  // Starts `titan ARGS` from the source tree with its stdout (and stderr too, with `both`) on
  // `fd`, which the caller closes after; returns its pid. `in_child`, when given, runs in the
  // child before titan starts (a resource limit); it returns false to give up.
  static pid_t spawn(std::vector<std::string> args, int fd, bool both,
                     const std::function<bool()>& in_child = nullptr) {
    args.insert(args.begin(), TITAN_CLI);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      if (both) ::dup2(fd, 2);
      if ((in_child && !in_child()) || ::chdir(TITAN_SOURCE_DIR) != 0) std::_Exit(127);
      ::execv(TITAN_CLI, argv.data());
      std::_Exit(127);
    }
    return pid;
  }
  // Reads `fd` to its end, calling `seen` with all read so far after each read; returns that.
  static std::string read_all(int fd, const std::function<void(const std::string&)>& seen = nullptr) {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) {
      out.append(buf, static_cast<size_t>(n));
      if (seen) seen(out);
    }
    return out;
  }

  fs::path dir_;
};

// The llama3 debug model with random weights as a Hugging Face folder, to convert.
fs::path write_hf_folder(const fs::path& hf) {
  models::ModelConfig m;
  Generator gen(7);
  std::shared_ptr<models::CausalLM> model = models::get_train_spec(m.name).build(m, 32, gen);
  const models::StateDictAdapter& adapter = models::hf_adapter(m.name);
  train::save_hf_model(hf, adapter, adapter.hf_config(m, models::common::hf::ConfigLayout::transformers5),
                       model->state_dict(), kF32);
  return hf;
}

TEST_F(CliGuards, ConvertLeavesAnOutThatHoldsOtherFilesUntouched) {
  const fs::path hf = write_hf_folder(dir_ / "hf");

  // A folder of the user's: refused, every file kept.
  const fs::path mine = dir_ / "mine";
  fs::create_directories(mine / "sub");
  std::ofstream(mine / "notes.txt") << "keep me";
  std::ofstream(mine / "sub" / "more.txt") << "and me";
  CliRun r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", mine.string(), "--overwrite"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--out " + mine.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("new or empty folder"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(mine / "notes.txt"), "keep me");
  EXPECT_EQ(slurp(mine / "sub" / "more.txt"), "and me");

  // A plain file: refused, kept.
  const fs::path file = dir_ / "model.bin";
  std::ofstream(file) << "weights of something else";
  r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", file.string(), "--overwrite"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--out " + file.string() + " is a file"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(file), "weights of something else");

  // An earlier output: replaced only with --overwrite.
  const fs::path out = dir_ / "out";
  r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", out.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", out.string()});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("pass --overwrite"), std::string::npos) << r.err;
  r = titan({"convert", "--to", "hf", "--checkpoint", out.string(), "--out", hf.string(), "--overwrite"});
  EXPECT_EQ(r.rc, 0) << r.err;
  r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", out.string(), "--overwrite"});
  EXPECT_EQ(r.rc, 0) << r.err;

  // ...and not once the user has put a file of theirs in it.
  std::ofstream(out / "README.md") << "my run";
  r = titan({"convert", "--to", "titan", "--hf", hf.string(), "--out", out.string(), "--overwrite"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("'README.md'"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(out / "README.md"), "my run");
  EXPECT_TRUE(fs::exists(out / checkpoint::kMetadataFile));

  EXPECT_NE(titan({"convert", "--help"}).out.find("--overwrite"), std::string::npos);
}

TEST(FolderLock, OneHolderAtATimeUntilItIsGone) {
  const fs::path dir = test::fresh_temp_dir("folder_lock");
  std::optional<FolderLock> first = FolderLock::try_lock(dir, "x.lock");
  ASSERT_TRUE(first);
  EXPECT_EQ(slurp(dir / "x.lock"), this_process() + "\n");
  std::string holder;
  EXPECT_FALSE(FolderLock::try_lock(dir, "x.lock", &holder));
  EXPECT_EQ(holder, this_process());
  first.reset();
  EXPECT_TRUE(FolderLock::try_lock(dir, "x.lock"));
  fs::remove_all(dir);
}

TEST_F(CliGuards, TrainRefusesACheckpointFolderAnotherRunHolds) {
  const fs::path ckpt = dir_ / "ckpt";
  fs::create_directories(ckpt);
  std::optional<FolderLock> held = FolderLock::try_lock(ckpt, train::kRunLockFile);
  ASSERT_TRUE(held);
  CliRun r = train();
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("checkpoint folder " + ckpt.string() + " is in use by another titan train run (" +
                       this_process()),
            std::string::npos)
      << r.err;
  EXPECT_EQ(train::CheckpointManager::list(ckpt).size(), 0u) << "the refused run saved a checkpoint";

  // The lock file a dead holder left names it, but the kernel released its lock.
  held.reset();
  std::ofstream(ckpt / train::kRunLockFile, std::ios::trunc) << "pid 999999 on host gone\n";
  r = train();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(train::CheckpointManager::list(ckpt).size(), 1u);
}

// bf16 training on a CPU without bf16 instructions is refused before anything is built, naming the
// key and what is missing. ONEDNN_MAX_CPU_ISA (oneDNN's own limit) stands in for such a CPU.
TEST_F(CliGuards, Bf16TrainingIsRefusedWithoutBf16Instructions) {
  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  CliRun r = train({"--training.mixed_precision_param=bfloat16"});
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("training.mixed_precision_param = \"bfloat16\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("neither AMX-BF16 nor AVX512-BF16"), std::string::npos) << r.err;
  EXPECT_EQ(train::CheckpointManager::list(dir_ / "ckpt").size(), 0u);
}

TEST_F(CliGuards, TrainRefusesAnUnwritableCheckpointFolderBeforeTheFirstStep) {
  // A plain file where a folder of the path should be: no user can create the folder.
  std::ofstream(dir_ / "file") << "x";
  const fs::path under_file = dir_ / "file" / "ckpt";
  CliRun r = train({"--checkpoint.folder=" + under_file.string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("checkpoint folder (job.dump_folder/checkpoint.folder) " + under_file.string() +
                       " cannot be created"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "a step ran first: " << r.out;
}

TEST_F(CliGuards, TrainRefusesAReadOnlyCheckpointFolderBeforeTheFirstStep) {
  // Tests in a container often run as root, whom permissions do not stop.
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which chmod 0555 does not stop from writing";
  const fs::path read_only = dir_ / "ckpt";
  fs::create_directories(read_only);
  fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                 fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const CliRun r = train();
  fs::permissions(read_only, fs::perms::owner_all, fs::perm_options::add);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(read_only.string() + " is not writable"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "a step ran first: " << r.out;
}

// Under /proc no folder can be made, even by root.
TEST_F(CliGuards, TrainRefusesUnwritableProfilingFoldersBeforeTheFirstStep) {
  for (const auto& [enable, key, what] :
       {std::tuple{"--profiling.enable_profiling=true", "save_traces_folder", "trace folder"},
        {"--profiling.enable_memory_snapshot=true", "save_memory_snapshot_folder",
         "memory snapshot folder"}}) {
    const CliRun r = train({"--checkpoint.enable=false", enable, "--profiling.profile_freq=1",
                            std::string("--profiling.") + key + "=/proc/titan_unwritable"});
    EXPECT_EQ(r.rc, 1) << key;
    EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(std::string(what) + " (job.dump_folder/profiling." + key +
                         ") /proc/titan_unwritable "
                         "cannot be created"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("unexpected"), std::string::npos) << r.err;
  }
}

// --print-schedule shows only a layout that training would run: the same checks refuse the rest.
TEST_F(CliGuards, PrintScheduleRefusesWhatTrainingRefuses) {
  const auto print = [&](const std::vector<std::string>& keys) {
    std::vector<std::string> a = {"train", "--config", "configs/llama3/debug.toml", "--print-schedule"};
    a.insert(a.end(), keys.begin(), keys.end());
    return titan(a);
  };
  const CliRun ok = print({"--parallelism.pipeline_parallel_degree=2"});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.out.find("titan: "), std::string::npos) << ok.out;
  for (const auto& [keys, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--parallelism.pipeline_parallel_degree=64"},
            "64 stages need at least 64 layers, the model has 6"},
           {{"--parallelism.pipeline_parallel_degree=2",
             "--parallelism.pipeline_parallel_split_points=layers.99"},
            "\"layers.99\" is not a layer"},
           {{"--parallelism.pipeline_parallel_degree=3",
             "--parallelism.pipeline_parallel_split_points=layers.2,layers.2"},
            "\"layers.2\" is not a layer \"layers.<i>\" after the previous split point"},
           {{"--parallelism.pipeline_parallel_degree=2",
             "--parallelism.pipeline_parallel_schedule=ZBVZeroBubble",
             "--parallelism.data_parallel_shard_degree=2"},
            "zero-bubble"}}) {
    const CliRun r = print(keys);
    EXPECT_EQ(r.rc, 1) << keys.back() << "\n" << r.out;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

TEST_F(CliGuards, TrainRefusesAConfigThatIsNoFileOrNamesNoModel) {
  CliRun r = titan({"train", "--config", dir_.string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'" + dir_.string() + "': it is a folder"), std::string::npos) << r.err;

  r = titan({"train", "--config", "/dev/null"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'/dev/null': it is no regular file"), std::string::npos) << r.err;

  std::ofstream(dir_ / "empty.toml");
  r = titan({"train", "--config", (dir_ / "empty.toml").string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find((dir_ / "empty.toml").string() + " is empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.name is missing"), std::string::npos) << r.err;

  std::ofstream(dir_ / "no_model.toml") << "[job]\ndescription = \"no model\"\n";
  r = titan({"train", "--config", (dir_ / "no_model.toml").string(), "--print-config"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("model.name is missing"), std::string::npos) << r.err;
  // Named on the command line instead, it is enough.
  r = titan(
      {"train", "--config", (dir_ / "no_model.toml").string(), "--model.name=llama3", "--print-config"});
  EXPECT_EQ(r.rc, 0) << r.err;
}

// A config's problems are told in the user's terms: the key, the value, what to do, and none of
// titan's own source locations.
TEST_F(CliGuards, ConfigProblemsCarryNoSourceLocations) {
  const std::string config = std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml";
  for (const std::vector<std::string>& overrides : {std::vector<std::string>{"--training.steps=0"},
                                                    {"--training.stpes=3"},
                                                    {"--parallelism.tensor_parallel_degree=2"},
                                                    {"--parallelism.data_parallel_replicate_degree=3"},
                                                    {"--moe.aux_loss_coeff=0.1"},
                                                    {"--model.vocab_size=7"}}) {
    std::vector<std::string> args = {"train", "--config", config,
                                     "--job.dump_folder=" + (dir_ / "out").string()};
    args.insert(args.end(), overrides.begin(), overrides.end());
    const CliRun r = titan(args);
    EXPECT_EQ(r.rc, 1) << overrides[0];
    EXPECT_NE(r.err.find(overrides[0].substr(2, overrides[0].find('=') - 2)), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("failed at"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << r.err;
  }
}

// Whatever a message ends with, the printed error ends in exactly one newline: the shell's prompt
// starts a line of its own, and no empty line is left.
TEST(ErrorLine, EndsInExactlyOneNewline) {
  EXPECT_EQ(as_error_line("titan: error: bad"), "titan: error: bad\n");
  EXPECT_EQ(as_error_line("titan: error: bad\n"), "titan: error: bad\n");
  EXPECT_EQ(as_error_line("titan: error: usage:\n  a\n\n \r\n"), "titan: error: usage:\n  a\n");
}

TEST_F(CliGuards, AnErrorEndsInOneNewline) {
  const CliRun r = train({"--training.steps=3", "--lr_scheduler.warmup_steps=10"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("warmup_steps"), std::string::npos) << r.err;
  EXPECT_TRUE(r.err.ends_with("got 10\n")) << r.err;
}

// A save that cannot write (here a file size limit, as a full disk refuses the next byte) ends
// the run with its error on a line of its own, not after a half-written "titan: checkpoint" line.
TEST_F(CliGuards, AFailedCheckpointWriteIsReportedOnALineOfItsOwn) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = spawn(train_args({"--checkpoint.interval=1", "--training.steps=1"}), pipe_fds[1], true, [] {
    // Past the limit a write fails with EFBIG instead of raising SIGXFSZ.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit small = {.rlim_cur = 64 << 10, .rlim_max = 64 << 10};
    return ::setrlimit(RLIMIT_FSIZE, &small) == 0;
  });
  ASSERT_GE(pid, 0);
  ::close(pipe_fds[1]);
  const std::string out = read_all(pipe_fds[0]);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  const size_t error = out.find("titan: error: ");
  ASSERT_NE(error, std::string::npos) << out;
  EXPECT_TRUE(error == 0 || out[error - 1] == '\n') << out;
  EXPECT_TRUE(out.ends_with("\n")) << out;
}

TEST_F(CliGuards, ResumeSaysWhichStepFolderItSkipsAndWhy) {
  ASSERT_EQ(train({"--checkpoint.interval=1", "--checkpoint.last_save_model_only=false"}).rc, 0);
  const fs::path ckpt = dir_ / "ckpt";
  fs::remove(ckpt / "step-2" / checkpoint::kMetadataFile);
  CliRun r =
      train({"--checkpoint.interval=1", "--checkpoint.last_save_model_only=false", "--training.steps=3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("skipping " + (ckpt / "step-2").string() + ": it holds no metadata.json"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("loaded " + (ckpt / "step-1").string()), std::string::npos) << r.out;
  // Saving step 2 again replaced nothing of the folder skipped: it was moved aside, whole.
  EXPECT_NE(r.out.find("moved " + (ckpt / "step-2").string() + " (no complete checkpoint) aside to "),
            std::string::npos)
      << r.out;
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(ckpt))
    if (e.path().filename().string().starts_with("step-2.incomplete-")) aside.push_back(e.path());
  ASSERT_EQ(aside.size(), 1u) << r.out;
  EXPECT_FALSE(fs::exists(aside[0] / checkpoint::kMetadataFile));
  EXPECT_FALSE(fs::is_empty(aside[0]));
  EXPECT_TRUE(fs::exists(ckpt / "step-2" / checkpoint::kMetadataFile));
}

TEST_F(CliGuards, InterruptedTrainExitsWith75AfterSavingACheckpoint) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid =
      spawn(train_args({"--training.steps=1000000", "--metrics.log_freq=1"}), pipe_fds[1], false);
  ASSERT_GE(pid, 0);
  ::close(pipe_fds[1]);
  // Signalled once a step has been logged: the run is in its loop, far from its last step.
  bool signalled = false;
  const std::string out = read_all(pipe_fds[0], [&](const std::string& so_far) {
    if (!signalled && so_far.find("\nstep ") != std::string::npos) signalled = ::kill(pid, SIGTERM) == 0;
  });
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(signalled) << "no step was logged: " << out;
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 75) << out;
  EXPECT_NE(out.find("(interrupted; exit status 75"), std::string::npos) << out;
  EXPECT_EQ(train::CheckpointManager::list(dir_ / "ckpt").size(), 1u) << out;
  EXPECT_NE(titan({"train", "--help"}).out.find("75 when SIGINT/SIGTERM stopped the run"), std::string::npos);
}

// A layout that cannot fit this machine (Llama 3 70B on one rank: over a TB) is refused with the
// plan's figures and what to change, by a dry run and by training alike, before anything
// proportional to the model is allocated; training.memory_check = "warn" lets the dry run go ahead.
TEST_F(CliGuards, AMemoryPlanOverTheMachinesMemoryIsRefusedUnlessToldToWarn) {
  const std::vector<std::string> seventy_b = {"train", "--config", "configs/llama3/70b.toml",
                                              "--parallelism.tensor_parallel_degree=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), seventy_b.begin(), seventy_b.end());
    return extra;
  };
  for (const std::vector<std::string>& args :
       {with({"--dry-run=1"}), with({"--training.dataset_path=" + (dir_ / "corpus.txt").string(),
                                     "--training.seq_len=1024", "--job.dump_folder=" + dir_.string()})}) {
    const CliRun r = titan(args);
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("titan: memory plan (rank 0 of 1, eager): step peak "), std::string::npos) << r.out;
    for (const char* part :
         {"training.memory_check = \"refuse\": this rank needs about", "parameters 262.8 GiB",
          "AdamW moments 525.7 GiB", "GiB are available (", "parallelism.data_parallel_shard_degree",
          "activation_checkpoint.mode", "training.local_batch_size", "training.seq_len",
          "training.memory_check = \"warn\" goes ahead"})
      EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
  }
  const CliRun warned = titan(with({"--dry-run=1", "--training.memory_check=warn"}));
  EXPECT_EQ(warned.rc, 0) << warned.err;
  EXPECT_NE(warned.out.find("titan: warning: training.memory_check = \"warn\": this rank needs about"),
            std::string::npos)
      << warned.out;
  EXPECT_NE(warned.out.find("float32 values alone would take 262.8"), std::string::npos) << warned.out;
}

// Redirected to a file, as under SLURM or nohup, the log's start-up lines are on disk as they are
// written: a run killed before its first step (for memory, say) leaves them behind.
TEST_F(CliGuards, ALogRedirectedToAFileHoldsTheStartUpLinesOfARunKilledBeforeItsFirstStep) {
  const fs::path log = dir_ / "train.log";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  // A step long enough (8 x 128 tokens: a tenth of a second on a fast core) that the file is read
  // between the start-up lines and the first step's line, whose flush would otherwise write them.
  const pid_t pid = spawn(
      train_args({"--training.steps=1000000", "--training.seq_len=128", "--training.local_batch_size=8"}), fd,
      false);
  ::close(fd);
  ASSERT_GE(pid, 0);
  std::string text;
  for (int i = 0; i < 6000 && text.find("titan: step eager") == std::string::npos; ++i) {
    ::usleep(10000);
    text = slurp(log);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_NE(text.find("titan: step eager"), std::string::npos)
      << "no start-up line reached the file in 60 s: '" << text << "'";
  EXPECT_EQ(text.find("\nstep "), std::string::npos)
      << "the start-up lines reached the file with the first step's only";
  for (const char* line : {"titan: memory plan (", "titan: memory check (", "titan: job ", "titan: model ",
                           "titan: batch ", "titan: step eager"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST_F(CliGuards, GenerateReadsTheFinalHuggingFaceSaveOfATrainingRun) {
  CliRun r = train({"--checkpoint.last_save_model_only=true", "--checkpoint.last_save_in_hf=true"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path ckpt = dir_ / "ckpt";
  ASSERT_TRUE(checkpoint::is_hf_dir(ckpt / "step-2"));
  // The run's tokenizer goes with the export, so that nothing else is needed to encode a prompt.
  EXPECT_TRUE(fs::exists(ckpt / "step-2" / "tokenizer.json"));
  r = titan({"generate", "--checkpoint", ckpt.string(), "--prompt", "In the", "--max-new-tokens", "4"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("In the")) << r.out;
  EXPECT_NE(r.err.find("loaded " + (ckpt / "step-2").string()), std::string::npos) << r.err;
}

TEST_F(CliGuards, AnErrorPrintedWhileTheTokenizeBarIsDrawnStartsALineOfItsOwn) {
  // The bar is redrawn in place on a terminal only: give the command one.
  const int terminal = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  ASSERT_EQ(::grantpt(terminal), 0);
  ASSERT_EQ(::unlockpt(terminal), 0);
  const int screen = ::open(::ptsname(terminal), O_RDWR | O_NOCTTY);
  ASSERT_GE(screen, 0);
  // The corpus draws the bar; the second file's second line is no JSON object.
  std::ofstream(dir_ / "bad.jsonl") << "{\"text\": \"hello\"}\n{not json\n";
  const pid_t pid = spawn({"tokenize", "--out", (dir_ / "tokens").string(), (dir_ / "corpus.txt").string(),
                           (dir_ / "bad.jsonl").string()},
                          screen, true);
  ASSERT_GE(pid, 0);
  ::close(screen);
  const std::string shown = read_all(terminal);  // until the command has exited (EIO)
  ::close(terminal);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << shown;
  ASSERT_NE(shown.find("\r["), std::string::npos) << "no bar was drawn: " << shown;
  const size_t error = shown.find("titan: error:");
  ASSERT_NE(error, std::string::npos) << shown;
  ASSERT_GT(error, 0u);
  EXPECT_EQ(shown[error - 1], '\n') << "the error shares the bar's line: " << shown;
}

}  // namespace
}  // namespace titan
