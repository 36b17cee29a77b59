// The hf family: config.json of each model_type read into the DecoderSpec transformers' class would
// compute (defaults for absent keys, refusals by name), the model's parameters as its summary
// counts them, folders routed to a flavored family only when a flavor matches, and the user's
// path: training from a config.json ends in an HF folder that seeds another run (model.hf_config
// left to checkpoint.initial_load_path), and titan convert both ways. The numbers against
// transformers are the parity tests' (tests/parity/hf_families.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/models/hf/decoder_spec.h"
#include "titan/models/hf/model.h"
#include "titan/models/llama3/model_args.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/models/registry.h"
#include "titan/train/config/job_config.h"
#include "titan/train/hf_interop.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::hf::DecoderSpec;
using models::hf::read_config;

json base(const std::string& model_type) {
  return {{"model_type", model_type},  {"hidden_size", 64},        {"intermediate_size", 96},
          {"num_hidden_layers", 2},    {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 256},         {"max_position_embeddings", 128}};
}

json with(json config, const json& changes) {
  config.update(changes);
  return config;
}

TEST(HfDecoderSpec, ReadsEachFamilysVariantWithTransformersDefaults) {
  const DecoderSpec llama = read_config(with(base("llama"), {{"attention_bias", true}, {"head_dim", 24}}));
  EXPECT_TRUE(llama.qkv_bias && llama.out_bias);
  EXPECT_EQ(llama.head_dim, 24);
  EXPECT_EQ(llama.residual, models::hf::Residual::pre_norm);

  const DecoderSpec qwen2 = read_config(
      with(base("qwen2"), {{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 1}}));
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.out_bias);
  EXPECT_EQ(qwen2.layers[0].sliding_window, 0);
  EXPECT_EQ(qwen2.layers[1].sliding_window, 8);

  // Gemma 2 with its caps absent takes the class's 50 and 30; null switches one off.
  const DecoderSpec gemma2 = read_config(with(base("gemma2"), {{"sliding_window", 8}, {"head_dim", 16}}));
  EXPECT_EQ(gemma2.attention_softcap, 50.0);
  EXPECT_EQ(gemma2.final_softcap, 30.0);
  EXPECT_NEAR(*gemma2.attention_scale, 1 / 16.0, 1e-15);  // query_pre_attn_scalar 256
  EXPECT_EQ(gemma2.layers[0].sliding_window, 8);           // even layers slide
  EXPECT_EQ(gemma2.layers[1].sliding_window, 0);
  EXPECT_TRUE(gemma2.norm.unit_offset && gemma2.tie_embeddings);
  EXPECT_EQ(gemma2.residual, models::hf::Residual::sandwich);
  EXPECT_NEAR(gemma2.embedding_scale, 8.0, 1e-15);
  EXPECT_FALSE(read_config(with(base("gemma2"), {{"sliding_window", 8}, {"final_logit_softcapping", nullptr}}))
                   .final_softcap.has_value());

  // Gemma 3: five local layers to one global, each kind with its RoPE.
  const DecoderSpec gemma3 = read_config(with(base("gemma3_text"), {{"num_hidden_layers", 6},
                                                                    {"sliding_window", 8},
                                                                    {"rope_theta", 1e6},
                                                                    {"rope_local_base_freq", 1e4}}));
  ASSERT_EQ(gemma3.ropes.size(), 2u);
  EXPECT_EQ(gemma3.ropes[0].theta, 1e6);
  EXPECT_EQ(gemma3.ropes[1].theta, 1e4);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(gemma3.layers[static_cast<size_t>(i)].sliding_window, i == 5 ? 0 : 8) << i;
    EXPECT_EQ(gemma3.layers[static_cast<size_t>(i)].rope, i == 5 ? 0u : 1u) << i;
  }

  // GPT-NeoX: a quarter of each head rotates unless the file says otherwise; no grouped heads.
  const DecoderSpec neox = read_config(base("gpt_neox"));
  EXPECT_EQ(neox.ropes[0].rotated(), 4);
  EXPECT_EQ(neox.n_kv_heads, 4);
  EXPECT_EQ(neox.residual, models::hf::Residual::parallel);
  EXPECT_EQ(neox.fused_qkv, models::hf::FusedQkv::interleaved);
  EXPECT_EQ(neox.norm.kind, models::common::NormArgs::Kind::layer);
  EXPECT_FALSE(neox.feed_forward.gated);

  const DecoderSpec granite = read_config(with(base("granite"), {{"logits_scaling", 4.0},
                                                                 {"attention_multiplier", 0.2}}));
  EXPECT_EQ(granite.logits_scale, 0.25);
  EXPECT_EQ(granite.attention_scale, 0.2);

  const DecoderSpec mixtral = read_config(with(base("mixtral"), {{"num_local_experts", 4}}));
  ASSERT_TRUE(mixtral.moe.has_value());
  EXPECT_EQ(mixtral.moe->num_experts, 4);
  EXPECT_EQ(mixtral.aux_loss_coeff, 0.0);  // router logits off: transformers adds no loss
}

TEST(HfDecoderSpec, RefusesWhatItCannotComputeByName) {
  EXPECT_TITAN_ERROR(read_config(base("bloom")), "model_type \"bloom\"", "gemma2", "mistral");
  EXPECT_TITAN_ERROR(read_config(base("deepseek_v3")), "deepseek_v3", "latent attention");
  EXPECT_TITAN_ERROR(read_config(base("gpt_oss")), "gpt_oss", "sinks");
  EXPECT_TITAN_ERROR(read_config(with(base("llama"), {{"hidden_act", "relu"}})), "hidden_act", "relu");
  EXPECT_TITAN_ERROR(read_config(with(base("mistral"), {{"attention_dropout", 0.1}})), "attention_dropout");
  EXPECT_TITAN_ERROR(read_config(with(base("llama"), {{"rope_scaling", {{"rope_type", "proportional"}}}})),
                     "proportional");
  EXPECT_TITAN_ERROR(read_config(with(base("qwen2"), {{"layer_types", {"full_attention"}}})), "layer_types");
  EXPECT_TITAN_ERROR(read_config(with(base("gemma"), {{"use_bidirectional_attention", true}})),
                     "use_bidirectional_attention");
  EXPECT_TITAN_ERROR(read_config(with(base("mixtral"), {{"router_jitter_noise", 0.1}})), "router_jitter_noise");
  EXPECT_TITAN_ERROR(read_config(with(base("llama"), {{"num_key_value_heads", 3}})), "num_key_value_heads");
}

// Every family's model holds the parameters its summary counts (the MFU's FLOPs come from them).
TEST(HfDecoderSpec, SummaryCountsTheModelsParameters) {
  for (const json& config :
       {with(base("llama"), {{"attention_bias", true}, {"mlp_bias", true}}), base("mistral"), base("qwen2"),
        base("qwen3"), base("gemma"), with(base("gemma2"), {{"sliding_window", 8}}),
        with(base("gemma3_text"), {{"sliding_window", 8}}), base("phi3"), base("olmo2"), base("granite"),
        base("gpt_neox"), base("mixtral")}) {
    const DecoderSpec spec = read_config(config);
    const models::hf::Transformer model(spec, 16);
    int64_t count = 0;
    for (const auto& [name, p] : model.named_parameters()) count += p.numel();
    EXPECT_EQ(models::hf::summarize(spec, 16).num_params, count) << spec.model_type;
  }
}

TEST(HfDecoderSpec, AFolderGoesToAFlavoredFamilyOnlyWhenAFlavorMatches) {
  const json debug = models::llama3::to_hf_config(models::llama3::flavor("debugmodel"));
  EXPECT_EQ(models::train_spec_for_hf(debug, "config.json").name, "llama3");
  EXPECT_EQ(models::train_spec_for_hf(debug, "config.json", "hf").name, "hf");
  EXPECT_EQ(models::train_spec_for_hf(with(debug, {{"hidden_size", 96}}), "config.json").name, "hf");
  EXPECT_EQ(models::train_spec_for_hf(base("mistral"), "config.json").name, "hf");
}

class HfDecoderRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::fresh_temp_dir(std::string("hf_decoder_") +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir); }

  train::JobConfig job(std::vector<std::string> extra) const {
    {
      std::ofstream f(dir / "corpus.txt");
      for (int i = 0; i < 200; ++i) f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
    }
    std::vector<std::string> o = {"--model.name=hf",
                                  "--model.tokenizer_path=",
                                  "--checkpoint.enable=true",
                                  "--checkpoint.keep_latest_k=0",
                                  "--training.dataset_path=" + (dir / "corpus.txt").string(),
                                  "--training.seq_len=16",
                                  "--training.local_batch_size=2",
                                  "--training.steps=2",
                                  "--lr_scheduler.warmup_steps=1",
                                  "--metrics.log_freq=100",
                                  "--metrics.enable_jsonl=false",
                                  "--metrics.peak_flops=1e11",
                                  "--job.dump_folder=" + (dir / "out").string()};
    o.insert(o.end(), extra.begin(), extra.end());
    return train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml", o);
  }

  static train::TrainResult run(const train::JobConfig& cfg) {
    std::ostringstream log;
    return train::Trainer(cfg, log).train();
  }

  fs::path dir;
};

// Gemma 2's variant (windows of 4 in 16 tokens, caps, sandwich norms, tied), room for the byte
// tokenizer's 259 ids.
TEST_F(HfDecoderRun, TrainingFromAConfigJsonEndsInAnHfFolderThatSeedsAnotherRun) {
  const json config = with(base("gemma2"), {{"vocab_size", 264},
                                            {"sliding_window", 4},
                                            {"head_dim", 16},
                                            {"attn_logit_softcapping", 5.0},
                                            {"final_logit_softcapping", 10.0}});
  {
    std::ofstream f(dir / "config.json");
    f << config.dump(2);
  }
  const std::string hf_config = "--model.hf_config=" + (dir / "config.json").string();
  const train::TrainResult first = run(job({hf_config, "--checkpoint.folder=" + (dir / "titan").string()}));
  ASSERT_EQ(first.losses.size(), 2u);
  run(job({hf_config, "--checkpoint.folder=" + (dir / "hf").string(), "--checkpoint.last_save_in_hf=true"}));
  const fs::path hf = dir / "hf" / "step-2", titan_export = dir / "titan" / "step-2";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf));
  EXPECT_EQ(checkpoint::HfReader(hf).config().value("model_type", ""), "gemma2");
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(hf), std::nullopt, "hf"),
                          test::titan_checkpoint_weights(titan_export));

  // titan convert --to hf of the titan checkpoint writes that folder again; --to titan and back is exact.
  train::export_hf_checkpoint(titan_export, dir / "converted", kF32);
  test::expect_same_hf_folder(dir / "converted", hf);
  train::import_hf_checkpoint(hf, dir / "imported");
  train::export_hf_checkpoint(dir / "imported", dir / "round_trip", kF32);
  test::expect_same_hf_folder(dir / "round_trip", hf);

  // From the folder alone: model.hf_config defaults to checkpoint.initial_load_path.
  const train::TrainResult from_hf =
      run(job({"--checkpoint.folder=" + (dir / "from-hf").string(), "--checkpoint.initial_load_path=" + hf.string()}));
  const train::TrainResult from_titan = run(job({hf_config, "--checkpoint.folder=" + (dir / "from-titan").string(),
                                                 "--checkpoint.initial_load_path=" + titan_export.string()}));
  ASSERT_EQ(from_hf.losses.size(), 2u);
  EXPECT_EQ(from_hf.losses, from_titan.losses) << "the HF export seeds a run as the titan checkpoint does";
  EXPECT_LT(from_hf.losses[0], first.losses[0]) << "the seeded run starts where the first one ended";
}

TEST_F(HfDecoderRun, KeysTheFamilyDoesNotReadAreRefused) {
  {
    std::ofstream f(dir / "config.json");
    f << base("mistral").dump();
  }
  const std::string hf_config = "--model.hf_config=" + (dir / "config.json").string();
  EXPECT_TITAN_ERROR(run(job({hf_config, "--model.n_layers=4"})), "model.n_layers", "num_hidden_layers");
  EXPECT_TITAN_ERROR(run(job({})), "model.hf_config", "initial_load_path");
  EXPECT_TITAN_ERROR(train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml",
                                            {hf_config}),
                     "model.hf_config", "model.name = \"hf\"");
}

}  // namespace
}  // namespace titan
