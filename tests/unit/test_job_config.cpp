#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "support/test_util.h"
#include "titan/train/config/job_config.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using train::JobConfig;
using train::load_job_config;
using train::parse_job_config;

// From the source-tree define, not __FILE__: with CCACHE_BASEDIR set, ccache makes __FILE__ relative
// to the build folder, which is not where ctest runs the tests.
const fs::path kConfigs = fs::path(TITAN_SOURCE_DIR) / "configs";

// Each test writes its TOML files into a fresh folder, removed afterwards.
class JobConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "titan_job_config_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  fs::path dir_;
};

// Loads no file, only overrides: the defaults with `overrides` applied, validated.
JobConfig with(const std::vector<std::string>& overrides) {
  return parse_job_config("", "test.toml", overrides);
}

TEST(JobConfig, DefaultsAreTorchTitans) {
  JobConfig c;
  EXPECT_EQ(c.job.dump_folder, "./outputs");
  EXPECT_EQ(c.model.name, "llama3");
  EXPECT_EQ(c.model.flavor, "debugmodel");
  EXPECT_EQ(c.model.attention, "splash");
  EXPECT_EQ(c.model.attn.block_q, 128);
  EXPECT_EQ(c.model.attn.block_kv, 128);
  EXPECT_EQ(c.model.vocab_size, 0);
  EXPECT_FALSE(c.model.weight_tying.has_value());
  EXPECT_DOUBLE_EQ(c.model.moe.aux_loss_coeff, 0.001);
  EXPECT_FALSE(c.model.moe.load_balance_bias);
  EXPECT_DOUBLE_EQ(c.model.moe.bias_update_rate, 0.001);
  EXPECT_EQ(c.optimizer.name, "AdamW");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 8e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 200);
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(c.lr_scheduler.decay_type, "linear");
  EXPECT_EQ(c.lr_scheduler.min_lr_factor, 0.0);
  EXPECT_EQ(c.training.local_batch_size, 8);
  EXPECT_EQ(c.training.global_batch_size, -1);
  EXPECT_FALSE(c.training.gradient_accumulation_steps.has_value());
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.training.steps, 10000);
  EXPECT_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.mixed_precision_param, "float32");
  EXPECT_EQ(c.training.seed, 0);
  EXPECT_EQ(c.parallelism.data_parallel_replicate_degree, 1);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, -1);
  EXPECT_EQ(c.parallelism.tensor_parallel_degree, 1);
  EXPECT_EQ(c.parallelism.pipeline_parallel_degree, 1);
  EXPECT_EQ(c.parallelism.context_parallel_degree, 1);
  EXPECT_EQ(c.parallelism.expert_parallel_degree, 1);
  EXPECT_FALSE(c.checkpoint.enable);
  EXPECT_EQ(c.checkpoint.folder, "checkpoint");
  EXPECT_EQ(c.checkpoint.interval, 500);
  EXPECT_EQ(c.checkpoint.keep_latest_k, 0);
  EXPECT_EQ(c.checkpoint.load_step, -1);
  EXPECT_EQ(c.checkpoint.initial_load_path, "");
  EXPECT_EQ(c.checkpoint.export_dtype, "float32");
  EXPECT_EQ(c.checkpoint.async_mode, "disabled");
  EXPECT_EQ(c.activation_checkpoint.selective_ac_option, "2");
  EXPECT_FALSE(c.compile.enable);
  EXPECT_EQ(c.compile.execution_mode(), "eager");
  EXPECT_EQ(c.metrics.log_freq, 10);
  EXPECT_FALSE(c.metrics.enable_tensorboard);
  EXPECT_EQ(c.metrics.save_tb_folder, "tb");
  EXPECT_EQ(c.metrics.peak_flops, 0.0);
  EXPECT_FALSE(c.profiling.enable_profiling);
  EXPECT_EQ(c.profiling.save_traces_folder, "profile_traces");
  EXPECT_EQ(c.profiling.profile_freq, 10);
  train::validate(c);
  // An empty file is the defaults.
  EXPECT_EQ(train::to_json(with({})), train::to_json(c));
}

TEST(JobConfig, KeysAreUniqueAndDotted) {
  std::vector<std::string> keys = train::config_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  for (const char* k : {"training.steps", "optimizer.lr", "lr_scheduler.decay_ratio", "checkpoint.enable",
                        "activation_checkpoint.selective_ac_option", "compile.scan_layers", "metrics.peak_flops"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

TEST(JobConfig, ShippedConfigsLoad) {
  JobConfig debug = load_job_config((kConfigs / "llama3/debug.toml").string());
  EXPECT_EQ(debug.model.flavor, "debugmodel");
  EXPECT_EQ(debug.training.seq_len, 256);
  EXPECT_EQ(debug.training.steps, 300);
  EXPECT_EQ(debug.lr_scheduler.decay_type, "cosine");
  for (auto [file, flavor] : {std::pair{"1b", "1B"}, {"8b", "8B"}, {"70b", "70B"}, {"405b", "405B"}}) {
    SCOPED_TRACE(file);
    JobConfig c = load_job_config((kConfigs / "llama3" / (std::string(file) + ".toml")).string());
    EXPECT_EQ(c.model.name, "llama3");
    EXPECT_EQ(c.model.flavor, flavor);
    EXPECT_EQ(c.training.mixed_precision_param, "bfloat16");
  }
  for (auto [file, name, flavor] : {std::tuple{"debug", "qwen3", "debugmodel"},
                                    {"debug_moe", "qwen3_moe", "debugmodel"},
                                    {"0.6b", "qwen3", "0.6B"},
                                    {"8b", "qwen3", "8B"},
                                    {"32b", "qwen3", "32B"},
                                    {"30b_a3b", "qwen3_moe", "30B-A3B"},
                                    {"235b_a22b", "qwen3_moe", "235B-A22B"}}) {
    SCOPED_TRACE(file);
    JobConfig c = load_job_config((kConfigs / "qwen3" / (std::string(file) + ".toml")).string());
    EXPECT_EQ(c.model.name, name);
    EXPECT_EQ(c.model.flavor, flavor);
  }
  EXPECT_TRUE(load_job_config((kConfigs / "qwen3/debug_moe.toml").string()).model.moe.load_balance_bias);
  EXPECT_EQ(load_job_config((kConfigs / "llama3/70b.toml").string()).parallelism.tensor_parallel_degree, 8);
  EXPECT_EQ(load_job_config((kConfigs / "llama3/405b.toml").string()).compile.execution_mode(), "graph");
}

TEST(JobConfig, OverridesOfEveryType) {
  JobConfig c = with({"--training.steps=50", "--optimizer.lr=3e-4", "--optimizer.weight_decay=0",
                      "--checkpoint.enable=true", "--model.flavor", "8B", "--job.description=two words",
                      "--lr_scheduler.decay_ratio=0.25", "--training.gradient_accumulation_steps", "4",
                      "--metrics.enable_tensorboard", "--metrics.enable_jsonl", "false",
                      "--training.seed=0x10", "--lr_scheduler.warmup_steps=1_0"});
  EXPECT_EQ(c.training.steps, 50);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);  // an integer where a float is expected
  EXPECT_TRUE(c.checkpoint.enable);
  EXPECT_EQ(c.model.flavor, "8B");
  EXPECT_EQ(c.job.description, "two words");
  EXPECT_EQ(c.lr_scheduler.decay_ratio, 0.25);
  EXPECT_EQ(c.training.gradient_accumulation_steps, 4);
  EXPECT_TRUE(c.metrics.enable_tensorboard);  // a bare bool key means true
  EXPECT_FALSE(c.metrics.enable_jsonl);
  EXPECT_EQ(c.training.seed, 16);  // TOML integer syntax
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 10);

  // The last override wins; "none" unsets an optional key.
  JobConfig d = with({"--lr_scheduler.decay_ratio=0.5", "--lr_scheduler.decay_ratio=none",
                      "--training.steps=7", "--lr_scheduler.warmup_steps=2", "--training.steps=9"});
  EXPECT_FALSE(d.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(d.training.steps, 9);

  // An optional bool: bare means true, "none" goes back to unset (the flavor's own).
  EXPECT_EQ(with({"--model.weight_tying"}).model.weight_tying, true);
  EXPECT_EQ(with({"--model.weight_tying=false"}).model.weight_tying, false);
  EXPECT_FALSE(
      with({"--model.weight_tying=true", "--model.weight_tying=none"}).model.weight_tying.has_value());
}

TEST_F(JobConfigFiles, OverridesApplyOverTheFile) {
  std::string path = write("x.toml", "[model]\nname = \"llama3\"\n[training]\nsteps = 100\nseq_len = 64\n");
  JobConfig c = load_job_config(path, {"--training.steps=5", "--lr_scheduler.warmup_steps=1"});
  EXPECT_EQ(c.training.steps, 5);
  EXPECT_EQ(c.training.seq_len, 64);
}

TEST(JobConfig, OverrideErrors) {
  EXPECT_TITAN_ERROR(with({"--traning.steps=5"}), "unknown key 'traning.steps'",
                     "override '--traning.steps=5'", "did you mean 'training.steps'?");
  EXPECT_TITAN_ERROR(with({"--training.stpes", "5"}), "unknown key 'training.stpes'",
                     "did you mean 'training.steps'?");
  EXPECT_TITAN_ERROR(with({"--training.steps=abc"}), "override '--training.steps=abc'", "expected an integer",
                     "found 'abc'");
  EXPECT_TITAN_ERROR(with({"--training.steps=1.5"}), "expected an integer",
                     "found a floating-point number (1.5)");
  EXPECT_TITAN_ERROR(with({"--optimizer.lr=fast"}), "override '--optimizer.lr=fast'", "expected a number");
  EXPECT_TITAN_ERROR(with({"--checkpoint.enable=yes"}), "expected a boolean (true or false)", "found 'yes'");
  EXPECT_TITAN_ERROR(with({"--training.steps=5\nx = 1"}), "expected an integer");
  EXPECT_TITAN_ERROR(with({"--training.steps"}), "override '--training.steps' has no value",
                     "--training.steps=VALUE");
  EXPECT_TITAN_ERROR(with({"training.steps=5"}), "override 'training.steps=5'", "--section.key=value");
  // All problems at once.
  EXPECT_TITAN_ERROR(with({"--training.steps=x", "--optimizer.lr=y"}), "2 problems", "--training.steps=x",
                     "--optimizer.lr=y");
}

TEST_F(JobConfigFiles, UnknownSectionsAndKeysNameFileLineAndSuggestion) {
  std::string path = write("x.toml",
                           "[job]\n"
                           "description = 'x'\n"
                           "\n"
                           "[traning]\n"
                           "steps = 5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'traning.steps' at " + path + ":5",
                     "did you mean 'training.steps'?");

  path = write("key.toml", "[training]\nseq_len = 8\nstpes = 5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'training.stpes' at " + path + ":3",
                     "did you mean 'training.steps'?");

  path = write("empty_section.toml", "[metrcs]\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown section [metrcs] at " + path + ":1",
                     "did you mean [metrics]?");

  path = write("far_section.toml", "[completely_different]\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown section [completely_different]",
                     "valid sections: job, model");

  // A key filed under the wrong section is found in its own.
  path = write("wrong_section.toml", "[job]\nseed = 3\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'job.seed' at " + path + ":2",
                     "did you mean 'training.seed'?");

  // TorchTitan's older names point to the new ones.
  path = write("renamed.toml", "[training]\nbatch_size = 4\n[checkpoint]\nenable_checkpoint = true\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "2 problems",
                     "unknown key 'training.batch_size' at " + path + ":2",
                     "did you mean 'training.local_batch_size'?", "did you mean 'checkpoint.enable'?");

  // Nothing close: the section's keys.
  path = write("far_key.toml", "[lr_scheduler]\nzzzzzzzzzzzz = 1\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'lr_scheduler.zzzzzzzzzzzz'",
                     "valid keys in [lr_scheduler]: warmup_steps, decay_ratio, decay_type, min_lr_factor");

  path = write("top_level.toml", "steps = 5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'steps' at " + path + ":1",
                     "keys belong in a [section]", "did you mean 'training.steps'?");

  // Dotted keys are keys too.
  path = write("dotted.toml", "training.stpes = 5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "unknown key 'training.stpes' at " + path + ":1",
                     "did you mean 'training.steps'?");
}

TEST_F(JobConfigFiles, WrongTypesNameKeyFileLineExpectedAndFound) {
  std::string path = write("x.toml", "[training]\nsteps = \"10\"\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "training.steps at " + path + ":2", "expected an integer",
                     "found a string (\"10\")");
  path = write("float.toml", "[training]\nseq_len = 2.5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "training.seq_len at " + path + ":2", "expected an integer",
                     "found a floating-point number (2.5)");
  path = write("bool.toml", "[checkpoint]\nenable = 1\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "checkpoint.enable at " + path + ":2", "expected a boolean",
                     "found an integer (1)");
  path = write("string.toml", "[model]\nflavor = 8\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "model.flavor at " + path + ":2", "expected a string",
                     "found an integer (8)");
  path = write("array.toml", "[optimizer]\nlr = [1, 2]\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "optimizer.lr at " + path + ":2", "expected a number",
                     "found an array");
  path = write("not_table.toml", "training = 5\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "[training] at " + path + ":1", "must be a table",
                     "found an integer (5)");
  path = write("ac.toml", "[activation_checkpoint]\nselective_ac_option = 2\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "activation_checkpoint.selective_ac_option", "expected a string");

  // Integers are fine where a float is expected.
  path = write("int_float.toml",
               "[model]\nname = \"llama3\"\n[optimizer]\nlr = 1\n[lr_scheduler]\ndecay_ratio = 0\n");
  JobConfig c = load_job_config(path);
  EXPECT_EQ(c.optimizer.lr, 1.0);
  EXPECT_EQ(c.lr_scheduler.decay_ratio, 0.0);
}

TEST_F(JobConfigFiles, SyntaxErrorsAndMissingFiles) {
  std::string path = write("x.toml", "[training]\nsteps = \n");
  EXPECT_TITAN_ERROR(load_job_config(path), "job config " + path + ":2", "invalid TOML");
  path = write("dup.toml", "[training]\nsteps = 1\nsteps = 2\n");
  EXPECT_TITAN_ERROR(load_job_config(path), path + ":3", "invalid TOML");
  EXPECT_TITAN_ERROR(load_job_config((dir_ / "absent.toml").string()), "cannot read", "absent.toml");
}

// One override, one broken rule: the message names the key, the value and what is allowed.
struct Violation {
  std::vector<std::string> overrides;
  std::vector<std::string> expected;
};

TEST(JobConfig, EveryValidationRule) {
  const std::vector<Violation> cases = {
      {{"--training.seq_len=0"}, {"training.seq_len = 0", "must be > 0"}},
      {{"--training.steps=-3"}, {"training.steps = -3", "must be > 0"}},
      {{"--training.local_batch_size=0"}, {"training.local_batch_size = 0", "must be > 0"}},
      {{"--optimizer.lr=-0.1"}, {"optimizer.lr = -0.1", "must be >= 0"}},
      {{"--optimizer.lr=inf"}, {"optimizer.lr = inf", "must be a finite number"}},
      {{"--optimizer.lr=nan"}, {"optimizer.lr = nan", "must be a finite number"}},
      {{"--optimizer.beta1=1"}, {"optimizer.beta1 = 1.0", "must be in [0, 1)"}},
      {{"--optimizer.beta2=-0.5"}, {"optimizer.beta2 = -0.5", "must be in [0, 1)"}},
      {{"--optimizer.eps=-1e-8"}, {"optimizer.eps = -1e-08", "must be >= 0"}},
      {{"--optimizer.weight_decay=-1"}, {"optimizer.weight_decay = -1.0", "must be >= 0"}},
      {{"--optimizer.name=SGD"}, {"optimizer.name = \"SGD\"", "must be one of \"AdamW\""}},
      {{"--lr_scheduler.warmup_steps=-1"}, {"lr_scheduler.warmup_steps = -1", "must be >= 0"}},
      {{"--lr_scheduler.decay_ratio=1.5"}, {"lr_scheduler.decay_ratio = 1.5", "must be in [0, 1]"}},
      {{"--lr_scheduler.decay_ratio=-0.1"}, {"lr_scheduler.decay_ratio = -0.1", "must be in [0, 1]"}},
      {{"--lr_scheduler.min_lr_factor=2"}, {"lr_scheduler.min_lr_factor = 2.0", "must be in [0, 1]"}},
      {{"--lr_scheduler.decay_type=exp"},
       {"lr_scheduler.decay_type = \"exp\"", "must be one of \"linear\", \"sqrt\", \"cosine\""}},
      {{"--training.max_norm=0"}, {"training.max_norm = 0.0", "must be > 0"}},
      {{"--training.global_batch_size=0"}, {"training.global_batch_size = 0", "must be > 0 or -1"}},
      {{"--training.global_batch_size=12"}, {"training.global_batch_size = 12", "not a multiple", "= 8"}},
      {{"--training.global_batch_size=16", "--parallelism.data_parallel_replicate_degree=2",
        "--parallelism.data_parallel_shard_degree=2"},
       {"training.global_batch_size = 16", "data-parallel degree (4) = 32"}},
      {{"--training.global_batch_size=32", "--training.gradient_accumulation_steps=2"},
       {"training.gradient_accumulation_steps = 2 disagrees", "= 4", "set one of the two"}},
      {{"--training.gradient_accumulation_steps=0"},
       {"training.gradient_accumulation_steps = 0", "must be >= 1"}},
      {{"--training.mixed_precision_param=float16"},
       {"training.mixed_precision_param = \"float16\"", "one of \"float32\", \"bfloat16\""}},
      // FSDP reduces float32 gradients only; a bf16 reduce is refused, not ignored.
      {{"--training.mixed_precision_reduce=bfloat16"},
       {"training.mixed_precision_reduce = \"bfloat16\"", "one of \"float32\""}},
      {{"--training.seed=-1"}, {"training.seed = -1", "must be >= 0"}},
      {{"--training.dataset="}, {"training.dataset = \"\"", "must be a non-empty string"}},
      {{"--job.dump_folder="}, {"job.dump_folder = \"\"", "non-empty"}},
      {{"--model.attention=flash"}, {"model.attention = \"flash\"", "one of \"reference\", \"splash\""}},
      {{"--model.vocab_size=-1"}, {"model.vocab_size = -1", "must be >= 0"}},
      {{"--parallelism.data_parallel_replicate_degree=0"},
       {"parallelism.data_parallel_replicate_degree = 0", "must be >= 1"}},
      {{"--parallelism.data_parallel_shard_degree=0"},
       {"parallelism.data_parallel_shard_degree = 0", "must be >= 1 or -1"}},
      {{"--parallelism.data_parallel_shard_degree=-2"}, {"data_parallel_shard_degree = -2", ">= 1 or -1"}},
      {{"--parallelism.tensor_parallel_degree=-1"},
       {"parallelism.tensor_parallel_degree = -1", "must be >= 1"}},
      {{"--parallelism.pipeline_parallel_degree=0"}, {"parallelism.pipeline_parallel_degree = 0", ">= 1"}},
      {{"--parallelism.context_parallel_degree=0"}, {"parallelism.context_parallel_degree = 0", ">= 1"}},
      {{"--parallelism.expert_parallel_degree=0"}, {"parallelism.expert_parallel_degree = 0", ">= 1"}},
      {{"--parallelism.fsdp_reshard_after_forward=sometimes"}, {"fsdp_reshard_after_forward", "\"never\""}},
      {{"--parallelism.pipeline_parallel_schedule=ZeroBubble"}, {"pipeline_parallel_schedule", "\"1F1B\""}},
      {{"--parallelism.pipeline_parallel_microbatch_size=0"},
       {"pipeline_parallel_microbatch_size = 0", "> 0"}},
      {{"--parallelism.pipeline_parallel_degree=2", "--parallelism.pipeline_parallel_microbatch_size=3"},
       {"pipeline_parallel_microbatch_size = 3 does not divide training.local_batch_size = 8"}},
      {{"--checkpoint.interval=0"}, {"checkpoint.interval = 0", "must be > 0"}},
      {{"--comm.timeout_seconds=0"}, {"comm.timeout_seconds = 0.0", "must be > 0"}},
      {{"--checkpoint.keep_latest_k=-1"}, {"checkpoint.keep_latest_k = -1", "must be >= 0"}},
      {{"--checkpoint.load_step=-2"}, {"checkpoint.load_step = -2", "must be >= 0 or -1"}},
      {{"--checkpoint.export_dtype=int8"}, {"checkpoint.export_dtype = \"int8\"", "\"bfloat16\""}},
      // TorchTitan's choice, which titan refuses with the config rather than after building the model.
      {{"--checkpoint.export_dtype=float16"},
       {"checkpoint.export_dtype = \"float16\": titan has no float16 tensors yet", "\"bfloat16\""}},
      {{"--checkpoint.async_mode=yes"}, {"checkpoint.async_mode = \"yes\"", "\"async_with_pinned_mem\""}},
      {{"--checkpoint.folder="}, {"checkpoint.folder = \"\"", "non-empty"}},
      {{"--checkpoint.last_save_in_hf=true", "--checkpoint.last_save_model_only=false"},
       {"last_save_in_hf = true needs checkpoint.last_save_model_only = true"}},
      {{"--checkpoint.hf_config_format=transformers3"},
       {"checkpoint.hf_config_format = \"transformers3\"", "\"transformers5\", \"transformers4\""}},
      {{"--checkpoint.hf_config_format=transformers4"},
       {"checkpoint.hf_config_format = \"transformers4\" applies to the Hugging Face export only",
        "--checkpoint.last_save_in_hf=true"}},
      {{"--activation_checkpoint.mode=some"},
       {"activation_checkpoint.mode = \"some\"", "one of \"none\", \"selective\", \"full\""}},
      {{"--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=0"},
       {"selective_ac_option = \"0\"", "positive integer"}},
      {{"--activation_checkpoint.mode=selective", "--activation_checkpoint.selective_ac_option=2x"},
       {"selective_ac_option = \"2x\"", "positive integer"}},
      {{"--metrics.log_freq=0"}, {"metrics.log_freq = 0", "must be > 0"}},
      {{"--metrics.save_tb_folder="}, {"metrics.save_tb_folder", "non-empty"}},
      {{"--metrics.peak_flops=-1"}, {"metrics.peak_flops = -1.0", "must be >= 0"}},
      {{"--profiling.profile_freq=0"}, {"profiling.profile_freq = 0", "must be > 0"}},
      {{"--profiling.save_traces_folder="}, {"profiling.save_traces_folder", "non-empty"}},
      {{"--training.steps=100"}, {"[lr_scheduler] with training.steps = 100", "warmup_steps"}},
      {{"--training.steps=300", "--lr_scheduler.warmup_steps=200", "--lr_scheduler.decay_ratio=0.5"},
       {"[lr_scheduler] with training.steps = 300", "overlap"}},
  };
  for (const Violation& v : cases) {
    SCOPED_TRACE(v.overrides[0]);
    std::vector<std::string> expected = v.expected;
    expected.push_back("job config test.toml is invalid");
    bool thrown = false;
    try {
      with(v.overrides);
    } catch (const Error& e) {
      thrown = true;
      for (const std::string& part : expected)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "lacks '" << part << "': " << e.what();
    }
    EXPECT_TRUE(thrown);
  }
  // The values at the edge of each rule are allowed.
  with({"--optimizer.lr=0", "--optimizer.beta1=0", "--lr_scheduler.decay_ratio=0",
        "--lr_scheduler.min_lr_factor=1", "--lr_scheduler.warmup_steps=0", "--checkpoint.load_step=-1",
        "--checkpoint.keep_latest_k=0", "--parallelism.data_parallel_shard_degree=-1",
        "--training.global_batch_size=64", "--activation_checkpoint.mode=selective",
        "--activation_checkpoint.selective_ac_option=1"});
  // An option of a mode not chosen would be ignored: refused, naming both keys.
  EXPECT_TITAN_ERROR(
      with({"--activation_checkpoint.mode=none", "--activation_checkpoint.selective_ac_option=op"}),
      "selective_ac_option = \"op\" applies to mode = \"selective\"", "mode is \"none\"");
}

TEST_F(JobConfigFiles, ValidationNamesWhereAValueWasSet) {
  std::string path = write("x.toml", "[training]\nseq_len = 0\n");
  EXPECT_TITAN_ERROR(load_job_config(path), "job config " + path + " is invalid",
                     "training.seq_len = 0 (" + path + ":2)", "must be > 0");
  EXPECT_TITAN_ERROR(load_job_config(path, {"--training.seq_len=-4"}),
                     "training.seq_len = -4 (override '--training.seq_len=-4')");
  // Every violation is listed.
  EXPECT_TITAN_ERROR(with({"--training.steps=0", "--metrics.log_freq=0"}), "2 problems", "training.steps = 0",
                     "metrics.log_freq = 0");
}

TEST(JobConfig, ValidateAConfigBuiltInCode) {
  JobConfig c;
  c.training.steps = 1000;
  train::validate(c);
  c.training.local_batch_size = 0;
  EXPECT_TITAN_ERROR(train::validate(c), "job config is invalid", "training.local_batch_size = 0",
                     "must be > 0");
}

// Every key moved off its default, strings that need escaping, floats that need all their digits.
JobConfig unusual_config() {
  return with({"--job.description=quotes \" and \\ backslash\tand tab",
               "--job.dump_folder=/tmp/ü out",
               "--model.flavor=8B",
               "--model.attention=reference",
               "--attention.block_q=96",
               "--attention.block_kv=48",
               "--moe.aux_loss_coeff=0.0125",
               "--moe.load_balance_bias=true",
               "--moe.bias_update_rate=0.002",
               "--model.vocab_size=128256",
               "--model.weight_tying=true",
               "--model.tokenizer_path=a/tokenizer.json",
               "--optimizer.lr=0.1",
               "--optimizer.beta1=0.3333333333333333",
               "--optimizer.beta2=0.999",
               "--optimizer.eps=1e-300",
               "--optimizer.weight_decay=0",
               "--lr_scheduler.warmup_steps=7",
               "--lr_scheduler.decay_ratio=0.2",
               "--lr_scheduler.decay_type=sqrt",
               "--lr_scheduler.min_lr_factor=0.05",
               "--training.dataset=/data/x.txt",
               "--training.dataset_path=/data",
               "--training.local_batch_size=3",
               "--training.global_batch_size=12",
               "--training.gradient_accumulation_steps=2",
               "--training.seq_len=132",
               "--training.steps=77",
               "--training.max_norm=0.5",
               "--training.mixed_precision_param=bfloat16",
               "--training.seed=123456789",
               "--parallelism.data_parallel_replicate_degree=2",
               "--parallelism.data_parallel_shard_degree=1",
               "--parallelism.fsdp_reshard_after_forward=never",
               "--parallelism.tensor_parallel_degree=4",
               "--parallelism.enable_sequence_parallel=false",
               "--parallelism.disable_loss_parallel=true",
               "--parallelism.pipeline_parallel_degree=3",
               "--parallelism.pipeline_parallel_schedule=GPipe",
               "--parallelism.pipeline_parallel_microbatch_size=3",
               "--parallelism.context_parallel_degree=2",
               "--parallelism.expert_parallel_degree=2",
               "--checkpoint.enable=true",
               "--checkpoint.folder=ck",
               "--checkpoint.interval=9",
               "--checkpoint.initial_load_path=/ckpt/step_10",
               "--checkpoint.initial_load_model_only=false",
               "--comm.timeout_seconds=17.5",
               "--checkpoint.last_save_model_only=true",
               "--checkpoint.last_save_in_hf=true",
               "--checkpoint.hf_config_format=transformers4",
               "--checkpoint.export_dtype=bfloat16",
               "--checkpoint.async_mode=async",
               "--checkpoint.keep_latest_k=3",
               "--checkpoint.load_step=40",
               "--activation_checkpoint.mode=selective",
               "--activation_checkpoint.selective_ac_option=3",
               "--compile.enable=true",
               "--metrics.log_freq=1",
               "--metrics.enable_tensorboard=true",
               "--metrics.save_tb_folder=tb2",
               "--metrics.enable_jsonl=false",
               "--metrics.save_for_all_ranks=true",
               "--metrics.disable_color_printing=true",
               "--metrics.peak_flops=1.5e14",
               "--profiling.enable_profiling=true",
               "--profiling.save_traces_folder=tr",
               "--profiling.profile_freq=3"});
}

TEST(JobConfig, PrintThenReloadRoundTrips) {
  JobConfig c = unusual_config();
  std::string text = train::to_toml(c);
  JobConfig back = parse_job_config(text, "printed.toml");
  EXPECT_EQ(train::to_json(back), train::to_json(c)) << text;
  EXPECT_EQ(back.optimizer.beta1, 0.3333333333333333);
  EXPECT_EQ(back.optimizer.eps, 1e-300);
  EXPECT_EQ(back.job.description, "quotes \" and \\ backslash\tand tab");
  // Every key is printed, set or not.
  for (const std::string& key : train::config_keys()) {
    std::string k = key.substr(key.find('.') + 1);
    EXPECT_TRUE(text.find("\n" + k + " = ") != std::string::npos ||
                text.find("\n# " + k + " is unset") != std::string::npos)
        << key;
  }

  // Unset optional keys stay unset; the shipped configs survive the trip too.
  JobConfig defaults;
  std::string printed = train::to_toml(defaults);
  EXPECT_NE(printed.find("# decay_ratio is unset"), std::string::npos);
  EXPECT_EQ(train::to_json(parse_job_config(printed, "defaults.toml")), train::to_json(defaults));
  for (const char* file : {"debug", "1b", "8b", "70b", "405b"}) {
    JobConfig shipped = load_job_config((kConfigs / "llama3" / (std::string(file) + ".toml")).string());
    EXPECT_EQ(train::to_json(parse_job_config(train::to_toml(shipped), file)), train::to_json(shipped))
        << file;
  }
}

TEST(JobConfig, Json) {
  JobConfig c = with({"--training.steps=77", "--lr_scheduler.warmup_steps=7"});
  nlohmann::json j = train::to_json(c);
  EXPECT_EQ(j["training"]["steps"], 77);
  EXPECT_EQ(j["model"]["name"], "llama3");
  EXPECT_EQ(j["optimizer"]["lr"], 8e-4);
  EXPECT_EQ(j["checkpoint"]["enable"], false);
  EXPECT_TRUE(j["lr_scheduler"]["decay_ratio"].is_null());
  EXPECT_TRUE(j["training"]["gradient_accumulation_steps"].is_null());
  EXPECT_EQ(train::to_json(with({"--lr_scheduler.decay_ratio=0.5"}))["lr_scheduler"]["decay_ratio"], 0.5);
}

TEST(JobConfig, JsonReadsBack) {
  // As a checkpoint keeps it: every key, set or unset, comes back as it was.
  for (const JobConfig& c : {unusual_config(), JobConfig{}}) {
    nlohmann::json j = train::to_json(c);
    EXPECT_EQ(train::to_json(train::job_config_from_json(j, "saved")), j);
  }
  // Absent keys take their defaults; the rest is checked as a file is.
  EXPECT_EQ(train::job_config_from_json({{"training", {{"seed", 5}}}}, "saved").training.seed, 5);
  auto with_key = [](const char* section, const char* key, const nlohmann::json& value) {
    nlohmann::json j = train::to_json(JobConfig{});
    j[section][key] = value;
    return j;
  };
  EXPECT_TITAN_ERROR(
      train::job_config_from_json(with_key("training", "sequence_length", 32), "m.json (config)"),
      "m.json (config)", "unknown key 'training.sequence_length'", "valid keys in [training]");
  EXPECT_TITAN_ERROR(train::job_config_from_json(with_key("training", "steps", "many"), "m"),
                     "training.steps", "expected an integer", "found a string");
  EXPECT_TITAN_ERROR(train::job_config_from_json(with_key("training", "steps", nlohmann::json::array()), "m"),
                     "training.steps", "found an array");
  EXPECT_TITAN_ERROR(train::job_config_from_json(with_key("training", "steps", 0), "m"),
                     "training.steps = 0");
  EXPECT_TITAN_ERROR(train::job_config_from_json(nlohmann::json::array(), "m"), "expected a JSON object");
}

TEST(JobConfig, BatchPlan) {
  JobConfig c;  // local 8, global -1
  EXPECT_EQ(train::plan_batches(c.training, 4).global_batch_size, 32);
  EXPECT_EQ(train::plan_batches(c.training, 4).gradient_accumulation_steps, 1);
  c.training.gradient_accumulation_steps = 3;
  EXPECT_EQ(train::plan_batches(c.training, 2).global_batch_size, 48);
  EXPECT_EQ(train::plan_batches(c.training, 2).gradient_accumulation_steps, 3);
  c.training.gradient_accumulation_steps.reset();
  c.training.global_batch_size = 64;
  EXPECT_EQ(train::plan_batches(c.training, 2).gradient_accumulation_steps, 4);
  EXPECT_EQ(train::plan_batches(c.training, 8).gradient_accumulation_steps, 1);
  // Known only at launch: a data-parallel degree the global batch does not split over.
  EXPECT_TITAN_ERROR(train::plan_batches(c.training, 3), "training.global_batch_size = 64",
                     "local_batch_size (8) x data-parallel degree (3) = 24");
  EXPECT_TITAN_ERROR(train::plan_batches(c.training, 0), "data-parallel degree must be at least 1");
}

TEST(JobConfig, LrScheduleAndActivationCheckpointing) {
  JobConfig c = with({"--lr_scheduler.decay_type=cosine", "--lr_scheduler.decay_ratio=0.1",
                      "--lr_scheduler.min_lr_factor=0.2", "--training.steps=1000"});
  optim::LrSchedule s = c.lr_scheduler.schedule(c.training.steps);
  EXPECT_EQ(s.training_steps, 1000);
  EXPECT_EQ(s.warmup_steps, 200);
  EXPECT_EQ(s.decay_ratio, 0.1);
  EXPECT_EQ(s.decay_type, optim::DecayType::cosine);
  EXPECT_EQ(s.min_lr_factor, 0.2);
  EXPECT_EQ(with({"--lr_scheduler.decay_type=sqrt"}).lr_scheduler.schedule(100).decay_type,
            optim::DecayType::sqrt);
  JobConfig defaults;
  EXPECT_EQ(defaults.lr_scheduler.schedule(defaults.training.steps).decay_type, optim::DecayType::linear);

  parallel::ActivationCheckpointConfig ac{.mode = "selective"};
  EXPECT_EQ(ac.every_k(), 2);
  // Assigned as std::string: GCC 12's -Wrestrict misreads the inlined assignment from a literal
  // here (a false positive that -Werror turns into a failed build).
  ac.selective_ac_option = std::string("5");
  EXPECT_EQ(ac.every_k(), 5);
  ac.selective_ac_option = std::string("-1");
  EXPECT_TITAN_ERROR(ac.every_k(), "positive integer");

  EXPECT_EQ(parallel::ActivationCheckpointConfig{.mode = "full"}.every_k(), 1);

  EXPECT_EQ(with({"--compile.enable"}).compile.execution_mode(), "graph");
  // Two keys for one bit once: compile.enable alone selects graph mode.
  EXPECT_TITAN_ERROR(with({"--compile.mode=graph"}), "unknown key 'compile.mode'",
                     "compile.enable = true alone selects graph mode");
}

}  // namespace
}  // namespace titan
