// Graph mode ([compile] enable = true) on the hf family: a model whose layers differ in kind
// (sliding or full attention, a RoPE table of their own) runs each run of consecutive layers of one
// kind as one loop over their stacked weights, and trains as eager does: the losses within the
// bound Llama's graph tests keep (1e-4 relative; float32 rounding only), with the layer loop, without
// it, and with full activation checkpointing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/graph_harness.h"
#include "support/small_run.h"
#include "support/test_util.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Gemma 2: sandwich norms, query_pre_attn_scalar, soft-capped attention and logits, windows of 8 in
// sequences of 32 on layers 0 and 2: four runs of one layer.
json gemma2() {
  return {{"model_type", "gemma2"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"vocab_size", 260},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"sliding_window", 8},
          {"query_pre_attn_scalar", 24},
          {"attn_logit_softcapping", 5.0},
          {"final_logit_softcapping", 10.0}};
}

// Gemma 3: two sliding layers with their own RoPE, then a full one (QK-norm, linear scaling): a
// loop of two layers and a run of one, over one stack of three layers' weights.
json gemma3() {
  json c = gemma2();
  c["model_type"] = "gemma3_text";
  c["num_hidden_layers"] = 3;
  c.erase("attn_logit_softcapping");
  c.erase("final_logit_softcapping");
  c["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention"};
  c["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"rope_theta", 100000.0}, {"factor", 8.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  return c;
}

// GPT-NeoX: biases on every projection, the row-wise dense and dense_4h_to_h too; LayerNorm, a
// parallel residual, half of each head rotated.
json gpt_neox() {
  return {{"model_type", "gpt_neox"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"vocab_size", 260},
          {"max_position_embeddings", 128},
          {"layer_norm_eps", 1e-5},
          {"rope_parameters",
           {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}}};
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-12);
}

// 8 steps of the model `config` describes, at a learning rate that moves the weights, with the byte
// tokenizer (259 ids; the configs have 260); `extra` last.
TrainResult train(const std::string& name, const json& config, const std::vector<std::string>& extra) {
  const fs::path dir = test::temp_dir("graph_hf") / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  std::vector<std::string> o = {"--model.name=hf", "--model.hf_config=" + dir.string(),
                                "--model.tokenizer_path=", "--training.steps=8", "--optimizer.lr=3e-3"};
  o.insert(o.end(), extra.begin(), extra.end());
  return run(small_config(o));
}

void expect_losses_near(const TrainResult& got, const TrainResult& want, double tolerance,
                        const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_LE(relative(got.losses[i], want.losses[i]), tolerance) << what << ", step " << i + 1;
    EXPECT_LE(relative(got.grad_norms[i], want.grad_norms[i]), 10 * tolerance) << what << ", step " << i + 1;
  }
}

const std::vector<std::string> kGraph = {"--compile.enable=true"};

TEST(GraphHf, Gemma2MatchesEager) {
  const TrainResult eager = train("gemma2", gemma2(), {}), graph = train("gemma2", gemma2(), kGraph);
  expect_losses_near(graph, eager, 1e-4, "gemma2-like, graph vs eager");
  EXPECT_LT(graph.losses.back(), graph.losses.front());
}

// The loop of the two sliding layers reads rows 0 and 1 of the stacks, the full layer row 2; each
// row's gradient lands in its own layer's moments. Unrolled (compile.scan_layers = false) each
// layer keeps its own state, and both train as eager does.
TEST(GraphHf, RunsOfLayersOfOneKindMatchEager) {
  const TrainResult eager = train("gemma3", gemma3(), {});
  expect_losses_near(train("gemma3", gemma3(), kGraph), eager, 1e-4, "gemma3-like, layer loop vs eager");
  std::vector<std::string> unrolled = kGraph;
  unrolled.push_back("--compile.scan_layers=false");
  expect_losses_near(train("gemma3", gemma3(), unrolled), eager, 1e-4, "gemma3-like, unrolled vs eager");
}

// The ops of the captured step as its start-up log gives them.
int64_t captured_ops(const json& config, const std::string& name) {
  const fs::path dir = test::temp_dir("graph_hf") / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  std::ostringstream log;
  Trainer(small_config({"--model.name=hf", "--model.hf_config=" + dir.string(), "--model.tokenizer_path=",
                        "--training.steps=1", "--lr_scheduler.warmup_steps=0", "--compile.enable=true"}),
          log)
      .train();
  const std::string text = log.str(), mark = "captured the step (";
  const size_t at = text.find(mark);
  EXPECT_NE(at, std::string::npos) << text;
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + mark.size()));
}

// A loop over a run of layers reads its rows of the stacked state as one slice and gives its
// gradients back as one stack, however many layers the run holds: 2 or 5 sliding layers before
// the full one, the same step.
TEST(GraphHf, StepOfRunsOfLayersDoesNotGrowWithDepth) {
  json deeper = gemma3();
  deeper["num_hidden_layers"] = 6;
  deeper["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                           "sliding_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(captured_ops(gemma3(), "gemma3_3_layers"), captured_ops(deeper, "gemma3_6_layers"));
}

// Full checkpointing keeps each block's input and computes the block again in backward (in the
// layer loop's body in graph mode, in autograd::checkpoint in eager): the same losses as eager
// without it.
TEST(GraphHf, FullActivationCheckpointingMatchesEager) {
  const std::vector<std::string> full = {"--activation_checkpoint.mode=full"};
  const TrainResult eager = train("gemma3", gemma3(), {});
  expect_losses_near(train("gemma3", gemma3(), full), eager, 1e-6,
                     "gemma3-like, eager with full checkpointing");
  std::vector<std::string> graph_full = kGraph;
  graph_full.insert(graph_full.end(), full.begin(), full.end());
  expect_losses_near(train("gemma3", gemma3(), graph_full), eager, 1e-4,
                     "gemma3-like, graph with full checkpointing");
}

// Graph mode's tensor parallelism states the plan and lets XLA's partitioner place the
// collectives: a bias after a row-wise projection, replicated, is added once to the reduced sum, as
// eager's plan adds it. TP 2 x FSDP 2 over 4 CPU devices trains as one device does.
TEST(GraphHf, TensorParallelBiasesMatchOneDevice) {
  if (test::test_runtime_options().plugin != "cpu")
    GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  std::vector<std::string> one = kGraph, split = kGraph;
  one.push_back("--training.local_batch_size=4");
  split.insert(split.end(), {"--parallelism.tensor_parallel_degree=2",
                             "--parallelism.data_parallel_shard_degree=2", "--training.local_batch_size=2"});
  expect_losses_near(train("gpt_neox", gpt_neox(), split), train("gpt_neox", gpt_neox(), one), 1e-5,
                     "gpt_neox-like, graph TP 2 x FSDP 2 vs one device");
}

}  // namespace
}  // namespace titan::train
