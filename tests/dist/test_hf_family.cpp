// The hf family (a model read from a Hugging Face config.json) under tensor, pipeline and fully
// sharded data parallelism: the same losses and gradient norms as one rank on the same global
// batch, for a config of each kind the plans could get wrong: sliding windows with a head_dim of
// its own (Mistral), partial rotary over a checkpoint that fuses q, k, v (Phi-3), sandwich norms,
// soft-caps and alternating windows (Gemma 2, also under context parallelism, whose ring attention
// carries each layer's window, cap and scale; Gemma 3's RoPE per layer type too), and biases after
// the row-wise projections (GPT-NeoX, Llama with attention_bias), which tensor parallelism adds
// once after its reduction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/dist/process_group.h"
#include "titan/models/registry.h"
#include "titan/train/trainer.h"
#include "trainer_fixture.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace testing;

// The sizes every config shares: 4 heads over 2 key/value heads, so that tp 2 splits both, and 4
// layers, so that each of 2 pipeline stages holds a run of several.
json tiny(const std::string& model_type, const json& keys) {
  json c = {{"model_type", model_type}, {"hidden_size", 64},
            {"intermediate_size", 96},  {"num_hidden_layers", 4},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"vocab_size", 260},        {"max_position_embeddings", 128},
            {"rms_norm_eps", 1e-5},     {"tie_word_embeddings", false}};
  c.update(keys);
  return c;
}

// Windows of 8 in sequences of 32; head_dim 24, not hidden_size / heads.
json mistral() {
  return tiny("mistral", {{"sliding_window", 8}, {"head_dim", 24}});
}
// Half of each head rotates; its checkpoint fuses qkv_proj and gate_up_proj.
json phi3() {
  return tiny("phi3",
              {{"sliding_window", 12},
               {"rope_parameters",
                {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}}});
}
// Sandwich norms, query_pre_attn_scalar, soft-capped attention and logits, windows on layers
// 0 and 2, tied embeddings.
json gemma2() {
  return tiny("gemma2", {{"head_dim", 16},
                         {"sliding_window", 8},
                         {"query_pre_attn_scalar", 24},
                         {"attn_logit_softcapping", 5.0},
                         {"final_logit_softcapping", 10.0},
                         {"tie_word_embeddings", true}});
}
// Gemma 3: QK-norms, three local layers to one global, each kind with its own RoPE base.
json gemma3() {
  return tiny("gemma3_text",
              {{"head_dim", 16},
               {"sliding_window", 8},
               {"query_pre_attn_scalar", 24},
               {"layer_types", {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}},
               {"rope_parameters",
                {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 100000.0}, {"factor", 8.0}}},
                 {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}}}});
}
// Biases on every projection (the row-wise dense and dense_4h_to_h too), a parallel residual,
// LayerNorm, no grouped-query attention.
json gpt_neox() {
  return tiny("gpt_neox",
              {{"num_key_value_heads", 4},
               {"layer_norm_eps", 1e-5},
               {"use_parallel_residual", true},
               {"rope_parameters",
                {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}}});
}
json llama_with_biases() {
  return tiny("llama", {{"attention_bias", true}, {"mlp_bias", true}});
}

// The overrides that train `config` as model.name = "hf", from a config.json in this rank's folder.
std::vector<std::string> hf_model(const std::string& name, const json& config) {
  const fs::path dir = job_dir(dist::world().rank()) / ("hf_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  return {"--model.name=hf", "--model.hf_config=" + dir.string()};
}

struct Layout {
  std::string what;
  std::vector<std::string> model;     // shared with the one-rank reference
  std::vector<std::string> parallel;  // the layout's own keys
  std::string logged;                 // what the start-up log says of the layout
};

TEST(HfFamily, ParallelLossesMatchOneRankOnTheSameGlobalBatch) {
  dist::ProcessGroup& world = dist::world();
  const int n = world.size();
  if (n != 2) GTEST_SKIP() << "the layouts are of 2 ranks";
  const std::vector<std::string> tp = {local_batch(1), "--parallelism.tensor_parallel_degree=2",
                                       "--parallelism.data_parallel_shard_degree=1"};
  const std::vector<std::string> pp = {local_batch(1), "--parallelism.pipeline_parallel_degree=2",
                                       "--parallelism.pipeline_parallel_schedule=1F1B",
                                       "--parallelism.pipeline_parallel_microbatch_size=1",
                                       "--parallelism.data_parallel_shard_degree=1"};
  const std::vector<std::string> fsdp = {local_batch(2), "--parallelism.data_parallel_shard_degree=2"};
  const std::vector<std::string> cp = {local_batch(1), "--parallelism.context_parallel_degree=2",
                                       "--parallelism.data_parallel_shard_degree=1"};
  const std::string tp_log = "tensor parallel over 2 ranks", pp_log = "pipeline parallel over 2 ranks";
  const std::vector<Layout> layouts = {
      {"mistral-like, TP 2", hf_model("mistral", mistral()), tp, tp_log},
      {"mistral-like, PP 2", hf_model("mistral", mistral()), pp, pp_log},
      {"phi3-like, TP 2", hf_model("phi3", phi3()), tp, tp_log},
      {"phi3-like, PP 2", hf_model("phi3", phi3()), pp, pp_log},
      {"gemma2-like, FSDP 2", hf_model("gemma2", gemma2()), fsdp, "dp_shard 2: FSDP"},
      // Ring attention with each layer's window, cap and scale; a RoPE table per layer type.
      {"gemma2-like, CP 2", hf_model("gemma2", gemma2()), cp, "context parallel over 2 ranks"},
      {"gemma3-like, CP 2", hf_model("gemma3", gemma3()), cp, "context parallel over 2 ranks"},
      // A row-wise bias's gradient: each rank's part under sequence parallelism (summed over tp),
      // whole on every rank without it.
      {"gpt_neox-like, TP 2", hf_model("gpt_neox", gpt_neox()), tp, tp_log},
      {"llama with attention_bias and mlp_bias, TP 2 without sequence parallelism",
       hf_model("llama", llama_with_biases()), join(tp, {"--parallelism.enable_sequence_parallel=false"}),
       tp_log},
  };
  for (const Layout& layout : layouts) {
    const OneRankReference want = one_rank_reference(layout.model, "configs/llama3/debug.toml");
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps)) << layout.what;
    std::ostringstream log;
    const TrainResult all = Trainer(small_config(join(layout.model, layout.parallel)), log, world).train();
    const double worst = expect_one_rank_figures(all, want, layout.what);
    if (world.rank() == 0) {
      std::cout << layout.what << " vs 1 rank: largest relative loss difference over " << kSteps << " steps "
                << worst << "\n";
      EXPECT_NE(log.str().find(layout.logged), std::string::npos) << layout.what << "\n" << log.str();
    }
  }
}

// Phi-3's checkpoint fuses q, k, v into qkv_proj and gate, up into gate_up_proj, which titan keeps
// apart and tensor parallelism splits as Llama's: a TP run's final export (slices gathered, then
// fused) holds the weights one rank trains, and a TP run from one rank's export splits the fused
// tensors and trains on as one rank does.
TEST(HfFamily, FusedCheckpointsExportAndImportUnderTensorParallelism) {
  dist::ProcessGroup& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "the layout is TP 2";
  const fs::path root = job_dir(0) / "hf_phi3_export";
  const std::vector<std::string> model = hf_model("phi3", phi3());
  auto run = [&](bool tp, const fs::path& folder, const std::vector<std::string>& extra) {
    std::vector<std::string> o =
        join(model, {"--checkpoint.enable=true", "--checkpoint.folder=" + folder.string(),
                     "--checkpoint.interval=100", "--checkpoint.keep_latest_k=0",
                     "--checkpoint.last_save_in_hf=true"});
    o = join(o, extra);
    TrainResult r;
    std::ostringstream log;
    if (tp)
      r = Trainer(small_config(join(o, {local_batch(1), "--parallelism.tensor_parallel_degree=2",
                                        "--parallelism.data_parallel_shard_degree=1"})),
                  log, world)
              .train();
    else if (world.rank() == 0)
      r = Trainer(small_config(join(o, {local_batch(1)})), log, dist::ProcessGroup::single()).train();
    world.barrier().wait();
    return r;
  };
  if (world.rank() == 0) fs::remove_all(root);
  world.barrier().wait();
  run(false, root / "one", {});
  run(true, root / "tp", {});
  if (world.rank() == 0) {
    checkpoint::HfReader one(root / "one" / "step-10"), tp(root / "tp" / "step-10");
    const auto shapes = models::get_train_spec("hf").state_dict_adapter->hf_shapes(one.config());
    ASSERT_TRUE(shapes.count("model.layers.0.self_attn.qkv_proj.weight"));
    ASSERT_TRUE(shapes.count("model.layers.0.mlp.gate_up_proj.weight"));
    const auto a = one.load(shapes, kF32), b = tp.load(shapes, kF32);
    // AdamW moves an element whose gradient is rounding noise by up to lr a step, either way (see
    // TensorParallel.HuggingFaceExportAndImport): 3e-4 of the tensor's largest weight.
    for (const auto& [name, t] : a) EXPECT_LE(relative_difference(t, b.at(name)), 3e-4) << name;
  }
  const std::vector<std::string> from_hf = {
      "--checkpoint.initial_load_path=" + (root / "one" / "step-10").string(),
      "--checkpoint.initial_load_model_only=true", "--training.steps=2"};
  const TrainResult one = run(false, root / "one_from_hf", from_hf),
                    tp = run(true, root / "tp_from_hf", from_hf);
  if (world.rank() == 0) {
    ASSERT_EQ(one.losses.size(), 2u);
    ASSERT_EQ(tp.losses.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(tp.losses[i], one.losses[i], 1e-5 * one.losses[i]) << i;
  }
  world.barrier().wait();
  if (world.rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace titan::train
