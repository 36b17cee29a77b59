#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "support/small_run.h"
#include "support/test_util.h"
#include "titan/data/dataset.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;

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
  TrainResult split =
      run(small_config({"--training.local_batch_size=2", "--training.gradient_accumulation_steps=2"}));
  ASSERT_EQ(whole.losses.size(), split.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_NEAR(split.losses[i], whole.losses[i], 1e-5 * whole.losses[i]);
}

TEST(Trainer, ActivationCheckpointingGivesIdenticalLosses) {
  TrainResult none = run(small_config());
  EXPECT_EQ(run(small_config({"--activation_checkpoint.mode=full"})).losses, none.losses);
  EXPECT_EQ(run(small_config({"--activation_checkpoint.mode=selective",
                              "--activation_checkpoint.selective_ac_option=2"}))
                .losses,
            none.losses);
}

TEST(Trainer, MoEAuxiliaryLossAndExpertLoadReachTheMetrics) {
  const fs::path dump = test::temp_dir("trainer_test") / "moe";
  fs::remove_all(dump);
  const std::vector<std::string> o = {"--metrics.enable_jsonl=true", "--metrics.log_freq=1",
                                      "--job.dump_folder=" + dump.string()};
  TrainResult r = run(small_config(o, "qwen3/debug_moe.toml"));
  ASSERT_EQ(r.losses.size(), 4u);
  std::ifstream jsonl(dump / "metrics.jsonl");
  std::string line;
  int lines = 0;
  for (; std::getline(jsonl, line); ++lines)
    for (const char* key : {"\"aux_loss\"", "\"moe/tokens_min\"", "\"moe/tokens_max\"", "\"moe/tokens_cv\""})
      EXPECT_NE(line.find(key), std::string::npos) << key << " missing from " << line;
  EXPECT_EQ(lines, 4);
  // The auxiliary loss reaches the routers through checkpointed blocks too.
  std::vector<std::string> full = o;
  full.push_back("--activation_checkpoint.mode=full");
  EXPECT_EQ(run(small_config(full, "qwen3/debug_moe.toml")).losses, r.losses);
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

TEST(Trainer, TokenShardsTrainExactlyLikeTheTextTheyWereMadeFrom) {
  JobConfig text = small_config({"--model.tokenizer_path=data/kjv_tokenizer", "--training.steps=2"});
  // The same corpus as token shards of 1000 ids (so windows straddle shards), written as
  // `titan tokenize` writes them.
  const fs::path shards = fs::temp_directory_path() / ("titan_trainer_shards_" + std::to_string(::getpid()));
  fs::remove_all(shards);
  auto tok = data::load_tokenizer("data/kjv_tokenizer");
  data::TokenShardWriter w(shards, {tok->vocab_size(), *tok->bos_id(), *tok->eos_id(), tok->fingerprint()},
                           1000);
  data::DatasetStats stats;
  std::vector<fs::path> files{text.data.dataset_path};
  data::for_each_document_batch(files, {}, stats, [&](std::span<const std::string_view> docs, int64_t) {
    std::vector<int32_t> packed;
    for (const auto& ids : tok->encode_batch(docs)) data::pack_document(ids, *tok, packed);
    w.append(packed);
  });
  w.finish();
  ASSERT_GT(w.shards().size(), 1u);
  JobConfig sharded = text;
  sharded.data.dataset_path = shards.string();
  EXPECT_EQ(run(sharded).losses, run(text).losses);

  sharded.model.tokenizer_path = "";
  EXPECT_TITAN_ERROR(run(sharded), "made by another tokenizer");
  fs::remove_all(shards);
}

TEST(Trainer, MissingDatasetIsAClearError) {
  EXPECT_TITAN_ERROR(run(small_config({"--training.dataset_path=/nonexistent/corpus.txt"})),
                     "training.dataset_path", "/nonexistent/corpus.txt");
}

// Keys whose feature is missing are refused, all in one message, and what is not missing runs.
TEST(Trainer, KeysForMissingFeaturesAreRefusedTogether) {
  EXPECT_TITAN_ERROR(run(small_config({"--compile.enable=true", "--parallelism.pipeline_parallel_degree=2",
                                       "--parallelism.context_parallel_degree=2"})),
                     "asks for what titan cannot do yet",
                     "parallelism.context_parallel_degree = 2 with compile.enable = true",
                     "parallelism.pipeline_parallel_degree = 2 with compile.enable = true");
}

// training.mixed_precision_param = "bfloat16" over 100 steps of the debug models (dense and MoE):
// the loss curves, as means over 10 steps, within 2% of the float32 run's, as the issue bounds
// them, and not equal to them (the products did run in bf16). On the bundled Bible, not
// small_config's repeated line: once a model has nearly memorised that line (loss 0.1-0.3) single
// steps, and even 10-step means of the MoE model, part by 3-10%, as any rounding of any precision
// sends a token to another expert now and then; on real text the curves stay within 0.1-1%.
// Against PyTorch's autocast: ParityHfTraining.TenBf16StepsMatchTorchAutocast.
TEST(Trainer, Bf16LossCurveStaysWithinTwoPercentOfFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
#if defined(__SANITIZE_ADDRESS__)
  // 400 training steps check numbers, not memory (344 s under the sanitizers); the bf16 kernels'
  // memory is checked there by their own tests. The release run covers this one.
  GTEST_SKIP() << "loss curves, run in the release build";
#endif
  for (const char* base : {"llama3/debug.toml", "qwen3/debug_moe.toml"}) {
    SCOPED_TRACE(base);
    expect_bf16_curve_near_float32(base, {});
  }
}

// [profiling]: the steps divisible by profile_freq are traced, each to its own file, with the
// spans a profile needs (a checkpoint written in the background included); the others leave
// nothing.
TEST(Trainer, ProfilingTracesTheStepsDivisibleByProfileFreq) {
  const fs::path dump = test::fresh_temp_dir("trainer_profiling");
  JobConfig cfg =
      small_config({"--training.steps=3", "--profiling.enable_profiling=true", "--profiling.profile_freq=2",
                    "--profiling.save_traces_folder=traces", "--job.dump_folder=" + dump.string(),
                    "--checkpoint.enable=true", "--checkpoint.interval=2", "--checkpoint.async_mode=async"});
  const fs::path traces = dump / "traces";
  std::ostringstream log;
  EXPECT_EQ(Trainer(cfg, log).train().steps_run, 3);
  const fs::path path = traces / "iteration_2" / "rank0_trace.json";
  EXPECT_NE(log.str().find("trace of step 2 written to " + path.string()), std::string::npos) << log.str();
  EXPECT_FALSE(fs::exists(traces / "iteration_1"));
  EXPECT_FALSE(fs::exists(traces / "iteration_3"));
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(traces), fs::directory_iterator()), 1);

  const nlohmann::json trace = nlohmann::json::parse(test::slurp(path));
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  std::map<std::string, int> by_category;
  std::set<std::string> ops, nodes, phases;
  std::map<int, std::string> thread_names;
  int checkpoint_writer_tid = -1;
  int64_t gemm_flops = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 0);
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const std::string cat = e.at("cat"), name = e.at("name");
    ++by_category[cat];
    if (cat == "op") {
      ops.insert(name);
      EXPECT_TRUE(e.at("args").at("inputs").is_array()) << name;
    }
    if (cat == "backward") {
      nodes.insert(name);
      EXPECT_TRUE(e.at("args").at("grads_out").is_array()) << name;
    }
    if (cat == "phase") phases.insert(name);
    if (name == "checkpoint write") checkpoint_writer_tid = e.at("tid");
    if (name == "sgemm") {
      const nlohmann::json& a = e.at("args");
      EXPECT_EQ(a.at("flops").get<int64_t>(),
                2 * a.at("M").get<int64_t>() * a.at("N").get<int64_t>() * a.at("K").get<int64_t>());
      gemm_flops += a.at("flops").get<int64_t>();
    }
  }
  for (const char* op : {"embedding", "linear", "rms_norm", "splash_attention", "cross_entropy"})
    EXPECT_TRUE(ops.contains(op)) << op;
  for (const char* node : {"linear", "splash_attention", "cross_entropy", "AccumulateGrad"})
    EXPECT_TRUE(nodes.contains(node)) << node;
  EXPECT_EQ(phases, (std::set<std::string>{"forward", "backward", "gradient reduce", "optimizer"}));
  EXPECT_GT(gemm_flops, 0);
  EXPECT_EQ(by_category["data"], 1) << "one batch per step";
  EXPECT_EQ(by_category["optimizer"], 1);
  EXPECT_EQ(by_category["step"], 1);
  EXPECT_EQ(thread_names[checkpoint_writer_tid], "checkpoint writer");
}

}  // namespace
}  // namespace titan::train
