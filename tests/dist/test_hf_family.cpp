// The hf family (a model read from a Hugging Face config.json) under tensor, pipeline and fully
// sharded data parallelism: the same losses and gradient norms as one rank on the same global
// batch, for a config of each kind the plans could get wrong: sliding windows with a head_dim of
// its own (Mistral), partial rotary over a checkpoint that fuses q, k, v (Phi-3), sandwich norms,
// soft-caps and alternating windows (Gemma 2), and biases after the row-wise projections (GPT-NeoX,
// Llama with attention_bias), which tensor parallelism adds once after its reduction.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/dist/process_group.h"
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
  json c = {{"model_type", model_type},   {"hidden_size", 64},         {"intermediate_size", 96},
            {"num_hidden_layers", 4},      {"num_attention_heads", 4},  {"num_key_value_heads", 2},
            {"vocab_size", 260},           {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5},
            {"tie_word_embeddings", false}};
  c.update(keys);
  return c;
}

// Windows of 8 in sequences of 32; head_dim 24, not hidden_size / heads.
json mistral() { return tiny("mistral", {{"sliding_window", 8}, {"head_dim", 24}}); }
// Half of each head rotates; its checkpoint fuses qkv_proj and gate_up_proj.
json phi3() {
  return tiny("phi3", {{"sliding_window", 12},
                       {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0},
                                            {"partial_rotary_factor", 0.5}}}});
}
// Sandwich norms, query_pre_attn_scalar, soft-capped attention and logits, windows on layers
// 0 and 2, tied embeddings.
json gemma2() {
  return tiny("gemma2", {{"head_dim", 16}, {"sliding_window", 8}, {"query_pre_attn_scalar", 24},
                         {"attn_logit_softcapping", 5.0}, {"final_logit_softcapping", 10.0},
                         {"tie_word_embeddings", true}});
}
// Biases on every projection (the row-wise dense and dense_4h_to_h too), a parallel residual,
// LayerNorm, no grouped-query attention.
json gpt_neox() {
  return tiny("gpt_neox", {{"num_key_value_heads", 4}, {"layer_norm_eps", 1e-5}, {"use_parallel_residual", true},
                           {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0},
                                                {"partial_rotary_factor", 0.5}}}});
}
json llama_with_biases() { return tiny("llama", {{"attention_bias", true}, {"mlp_bias", true}}); }

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
  const std::string tp_log = "tensor parallel over 2 ranks", pp_log = "pipeline parallel over 2 ranks";
  const std::vector<Layout> layouts = {
      {"mistral-like, TP 2", hf_model("mistral", mistral()), tp, tp_log},
      {"mistral-like, PP 2", hf_model("mistral", mistral()), pp, pp_log},
      {"phi3-like, TP 2", hf_model("phi3", phi3()), tp, tp_log},
      {"phi3-like, PP 2", hf_model("phi3", phi3()), pp, pp_log},
      {"gemma2-like, FSDP 2", hf_model("gemma2", gemma2()), fsdp, "dp_shard 2: FSDP"},
      // A row-wise bias's gradient: each rank's part under sequence parallelism (summed over tp),
      // whole on every rank without it.
      {"gpt_neox-like, TP 2", hf_model("gpt_neox", gpt_neox()), tp, tp_log},
      {"llama with attention_bias and mlp_bias, TP 2 without sequence parallelism",
       hf_model("llama", llama_with_biases()), join(tp, {"--parallelism.enable_sequence_parallel=false"}), tp_log},
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

}  // namespace
}  // namespace titan::train
