// Hugging Face interop of Qwen 3, dense and MoE: the state dict adapter (names, experts sliced
// out of their stacks and stacked back, config.json and its errors, flavors), HF folders through
// titan convert's functions, and training runs that end in an HF export or start from one.
// transformers itself checks the same layouts in tests/parity/test_parity_hf_interop.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/models/qwen3/model.h"
#include "titan/ops/arith.h"
#include "titan/models/qwen3/state_dict_adapter.h"
#include "titan/train/hf_interop.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
namespace qwen3 = models::qwen3;
using json = nlohmann::json;
using qwen3::Family;
using qwen3::ModelArgs;
using qwen3::Transformer;

// The registry's debugmodel of `family` at a short context.
ModelArgs debug_args(Family family) {
  ModelArgs a = qwen3::flavor(family, "debugmodel");
  a.max_seq_len = 16;
  return a;
}

// Random weights everywhere, norms included (ones would hide a swapped norm).
std::unique_ptr<Transformer> random_model(const ModelArgs& args, uint64_t seed) {
  auto m = std::make_unique<Transformer>(args);
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : m->named_parameters()) p.copy_(test::rand_f32(p.sizes(), seed++, -0.5, 0.5));
  return m;
}

Tensor tokens() {
  return Tensor::from_vector<int64_t>({3, 17, 40, 2, 9, 9, 31, 0, 47, 12, 5, 28}, {2, 6});
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

class HfQwen3 : public ::testing::TestWithParam<Family> {};

INSTANTIATE_TEST_SUITE_P(Families, HfQwen3, ::testing::Values(Family::dense, Family::moe),
                         [](const auto& info) { return std::string(qwen3::family_name(info.param)); });

// ---- the adapter ------------------------------------------------------------------------------

TEST_P(HfQwen3, ExportMatchesHfShapesAndImportGivesTheSameBits) {
  const ModelArgs args = debug_args(GetParam());
  auto model = random_model(args, 1);
  const nn::StateDict ours = model->state_dict();
  const nn::StateDict hf = qwen3::to_hf(ours, args);
  // The shapes config.json implies, as an importer reads them.
  const auto shapes = qwen3::hf_shapes(qwen3::parse_hf_config(GetParam(), qwen3::to_hf_config(args)));
  ASSERT_EQ(hf.size(), shapes.size());
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(hf.count(name)) << name;
    EXPECT_EQ(hf.at(name).sizes(), shape) << name;
  }
  test::expect_same_state(qwen3::from_hf(hf, args), ours);

  // Both rotate halves: q and k keep their rows.
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.1.self_attn.q_proj.weight"), ours.at("layers.1.attention.wq.weight")));
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.1.self_attn.k_proj.weight"), ours.at("layers.1.attention.wk.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("model.layers.0.self_attn.k_norm.weight"),
                        ours.at("layers.0.attention.k_norm.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("model.layers.2.post_attention_layernorm.weight"),
                        ours.at("layers.2.ffn_norm.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("lm_head.weight"), ours.at("output.weight")));
  if (GetParam() == Family::dense) {
    EXPECT_TRUE(
        test::same_bits(hf.at("model.layers.1.mlp.up_proj.weight"), ours.at("layers.1.feed_forward.w3.weight")));
    return;
  }
  EXPECT_EQ(hf.count("model.layers.0.mlp.experts.7.gate_proj.weight"), 1u);
  EXPECT_EQ(hf.count("model.layers.0.mlp.experts.8.gate_proj.weight"), 0u);
  // Expert e of HF is row e of our stack, as it is: [out, in] both.
  const Tensor& w2 = ours.at("layers.3.moe.experts.w2");
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.3.mlp.experts.5.down_proj.weight"), w2.narrow(0, 5, 1).squeeze(0)));
  const Tensor& w1 = ours.at("layers.2.moe.experts.w1");
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.2.mlp.experts.0.gate_proj.weight"), w1.narrow(0, 0, 1).squeeze(0)));
  EXPECT_TRUE(test::same_bits(hf.at("model.layers.1.mlp.gate.weight"), ours.at("layers.1.moe.router.gate.weight")));
}

TEST_P(HfQwen3, ForeignAndMissingTensorsAreNamed) {
  const ModelArgs args = debug_args(GetParam());
  const nn::StateDict hf = qwen3::to_hf(random_model(args, 2)->state_dict(), args);
  nn::StateDict foreign = hf;
  foreign["model.layers.0.self_attn.q_proj.bias"] = Tensor::zeros({4});
  EXPECT_TITAN_ERROR(qwen3::from_hf(foreign, args), "'model.layers.0.self_attn.q_proj.bias' is not one of",
                     GetParam() == Family::dense ? "Qwen3ForCausalLM's" : "Qwen3MoeForCausalLM's");
  nn::StateDict ours = random_model(args, 2)->state_dict();
  ours["layers.0.attention.rope_freqs"] = Tensor::zeros({4});
  EXPECT_TITAN_ERROR(qwen3::to_hf(ours, args), "'layers.0.attention.rope_freqs' has no Hugging Face name");
  if (GetParam() == Family::dense) return;

  nn::StateDict missing = hf;
  missing.erase("model.layers.2.mlp.experts.6.up_proj.weight");
  EXPECT_TITAN_ERROR(qwen3::from_hf(missing, args),
                     "'model.layers.2.mlp.experts.6.up_proj.weight' is missing", "8 experts");
  nn::StateDict extra = hf;
  extra["model.layers.2.mlp.experts.8.up_proj.weight"] = hf.at("model.layers.2.mlp.experts.0.up_proj.weight");
  EXPECT_TITAN_ERROR(qwen3::from_hf(extra, args),
                     "'model.layers.2.mlp.experts.8.up_proj.weight' is not one of");
  nn::StateDict misshaped = hf;
  misshaped["model.layers.1.mlp.experts.3.down_proj.weight"] = Tensor::zeros({256, 255});
  EXPECT_TITAN_ERROR(qwen3::from_hf(misshaped, args),
                     "'model.layers.1.mlp.experts.3.down_proj.weight' is f32[256, 255]");
}

TEST(HfQwen3Moe, TheExpertBiasHasNoHfCounterpart) {
  ModelArgs args = debug_args(Family::moe);
  args.moe->load_balance_bias = true;
  EXPECT_TITAN_ERROR(qwen3::to_hf_config(args), "chooses experts without a bias",
                     "--moe.load_balance_bias=false");
  EXPECT_TITAN_ERROR(qwen3::to_hf(Transformer(args).state_dict(), args),
                     "'layers.0.moe.router.expert_bias' has no Hugging Face counterpart",
                     "moe.load_balance_bias = false");
}

TEST(HfQwen3Dense, TiedEmbeddingsWriteNoLmHeadAndImportTied) {
  ModelArgs args = debug_args(Family::dense);
  args.tie_embeddings = true;
  auto model = random_model(args, 3);
  const json config = qwen3::to_hf_config(args);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  const nn::StateDict hf = qwen3::to_hf(model->state_dict(), args);
  EXPECT_FALSE(hf.count("lm_head.weight"));
  EXPECT_FALSE(qwen3::hf_shapes(qwen3::parse_hf_config(Family::dense, config)).count("lm_head.weight"));
  const nn::StateDict back = qwen3::from_hf(hf, qwen3::parse_hf_config(Family::dense, config));
  EXPECT_FALSE(back.count("output.weight"));
  test::expect_same_state(back, model->state_dict());
  Transformer reloaded(qwen3::parse_hf_config(Family::dense, config));
  reloaded.load_state_dict(back);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(test::same_bits(reloaded(tokens()), (*model)(tokens())));
}

TEST(HfQwen3Dense, ATiedFolderThatAlsoStoresLmHeadLoadsWhenItIsTheEmbeddingsCopy) {
  ModelArgs args = debug_args(Family::dense);
  args.tie_embeddings = true;
  auto model = random_model(args, 4);
  const json config = qwen3::to_hf_config(args);
  nn::StateDict hf = qwen3::to_hf(model->state_dict(), args);
  const fs::path dir = test::fresh_temp_dir("hf_qwen3_tied_lm_head");
  hf["lm_head.weight"] = hf.at("model.embed_tokens.weight").clone();
  checkpoint::save_hf(dir / "copy", config, hf, kF32);
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(dir / "copy"), std::nullopt),
                          model->state_dict());
  hf["lm_head.weight"] = hf.at("model.embed_tokens.weight") * 2.0;
  checkpoint::save_hf(dir / "differs", config, hf, kF32);
  EXPECT_TITAN_ERROR(train::load_hf_state(checkpoint::HfReader(dir / "differs"), std::nullopt),
                     "tie_word_embeddings = true, but its lm_head.weight differs from model.embed_tokens.weight",
                     "config.json");
  fs::remove_all(dir);
}

// ---- config.json --------------------------------------------------------------------------------

TEST_P(HfQwen3, ConfigRoundTripsAndNamesItsClass) {
  const Family family = GetParam();
  ModelArgs args = debug_args(family);
  args.norm_eps = 1e-5;
  args.aux_loss_coeff = 0.02;
  const json c = qwen3::to_hf_config(args);
  EXPECT_EQ(c["model_type"], qwen3::family_name(family));
  EXPECT_EQ(c["architectures"],
            json::array({family == Family::dense ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"}));
  EXPECT_EQ(c["head_dim"], 64);
  EXPECT_EQ(c["hidden_size"], 256);
  EXPECT_EQ(c["max_position_embeddings"], 16);
  const ModelArgs a = qwen3::parse_hf_config(family, c);
  EXPECT_EQ(a.dim, args.dim);
  EXPECT_EQ(a.n_layers, args.n_layers);
  EXPECT_EQ(a.n_heads, args.n_heads);
  EXPECT_EQ(a.n_kv_heads, args.n_kv_heads);
  EXPECT_EQ(a.head_dim, args.head_dim);
  EXPECT_EQ(a.ffn_dim, args.ffn_dim);
  EXPECT_EQ(a.vocab_size, args.vocab_size);
  EXPECT_EQ(a.norm_eps, 1e-5);
  EXPECT_EQ(a.rope_theta, args.rope_theta);
  EXPECT_EQ(a.max_seq_len, 16);
  EXPECT_EQ(a.tie_embeddings, args.tie_embeddings);
  ASSERT_EQ(a.moe.has_value(), family == Family::moe);
  if (family == Family::moe) {
    EXPECT_EQ(c["num_local_experts"], 8);
    EXPECT_EQ(c["num_experts_per_tok"], 2);
    EXPECT_EQ(c["moe_intermediate_size"], 256);
    EXPECT_EQ(c["norm_topk_prob"], true);
    EXPECT_EQ(c["decoder_sparse_step"], 1);
    EXPECT_EQ(c["mlp_only_layers"], json::array());
    EXPECT_EQ(c["router_aux_loss_coef"], 0.02);
    EXPECT_EQ(a.moe->num_experts, 8);
    EXPECT_EQ(a.moe->top_k, 2);
    EXPECT_EQ(a.moe->hidden_dim, 256);
    EXPECT_TRUE(a.moe->norm_topk_prob);
    EXPECT_EQ(a.aux_loss_coeff, 0.02);
  }
}

TEST_P(HfQwen3, EveryFlavorIsFoundAndOthersNameTheClosest) {
  const Family family = GetParam();
  for (const std::string& name : qwen3::flavor_names(family)) {
    const ModelArgs f = qwen3::flavor(family, name);
    const models::ModelConfig m =
        qwen3::matching_flavor(family, qwen3::parse_hf_config(family, qwen3::to_hf_config(f)));
    EXPECT_EQ(m.name, qwen3::family_name(family));
    EXPECT_EQ(m.flavor, name);
    EXPECT_EQ(m.vocab_size, f.vocab_size);
    EXPECT_EQ(m.weight_tying, f.tie_embeddings) << name;
  }
  // What a job chooses is not the flavor's business: another vocabulary, tying and coefficient.
  ModelArgs chosen = qwen3::flavor(family, "debugmodel");
  chosen.vocab_size = 3000;
  chosen.tie_embeddings = true;
  chosen.aux_loss_coeff = 0.05;
  const models::ModelConfig m = qwen3::matching_flavor(family, chosen);
  EXPECT_EQ(m.flavor, "debugmodel");
  EXPECT_EQ(m.vocab_size, 3000);
  EXPECT_EQ(m.weight_tying, true);
  if (family == Family::moe) {
    EXPECT_EQ(m.moe.aux_loss_coeff, 0.05);
  }

  ModelArgs other = qwen3::flavor(family, "debugmodel");
  other.n_layers = 2;
  const std::string name = qwen3::family_name(family);
  EXPECT_TITAN_ERROR(qwen3::matching_flavor(family, other), "describes no " + name + " flavor",
                     "the closest, debugmodel, differs in",
                     "num_hidden_layers (config.json 2, debugmodel " +
                         std::to_string(qwen3::flavor(family, "debugmodel").n_layers) + ")");
}

TEST(HfQwen3Config, PublishedConfigsAreTheirFlavors) {
  // Qwen3-0.6B's and Qwen3-30B-A3B's config.json as published (token ids left out).
  const json dense = json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  const models::ModelConfig d =
      qwen3::matching_flavor(Family::dense, qwen3::parse_hf_config(Family::dense, dense));
  EXPECT_EQ(d.flavor, "0.6B");
  EXPECT_EQ(d.weight_tying, true);
  const json moe = json::parse(R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
  const models::ModelConfig m = qwen3::matching_flavor(Family::moe, qwen3::parse_hf_config(Family::moe, moe));
  EXPECT_EQ(m.flavor, "30B-A3B");
  EXPECT_EQ(m.moe.aux_loss_coeff, 0.001);
  // Both through the registry, by model_type.
  EXPECT_EQ(models::train_spec_for_hf(dense, "config.json").name, "qwen3");
  EXPECT_EQ(models::train_spec_for_hf(moe, "config.json").name, "qwen3_moe");
}

// config.json with `key` set to `value` (removed when null).
json with(json config, const char* key, const json& value) {
  if (value.is_null())
    config.erase(key);
  else
    config[key] = value;
  return config;
}

TEST_P(HfQwen3, ConfigsItCannotComputeAreErrorsNamingTheKey) {
  const Family family = GetParam();
  const json good = qwen3::to_hf_config(debug_args(family), qwen3::ConfigLayout::transformers4);
  auto parse = [family](const json& c) { return qwen3::parse_hf_config(family, c); };
  const std::string other = family == Family::dense ? "qwen3_moe" : "qwen3";
  EXPECT_TITAN_ERROR(parse(with(good, "model_type", other)), "model_type is \"" + other + "\"");
  EXPECT_TITAN_ERROR(parse(with(good, "model_type", "llama")), "model_type is \"llama\"");
  EXPECT_TITAN_ERROR(parse(with(good, "num_key_value_heads", 3)),
                     "num_key_value_heads (3) must divide num_attention_heads (8)");
  EXPECT_TITAN_ERROR(parse(with(good, "num_attention_heads", 0)), "num_attention_heads");
  EXPECT_TITAN_ERROR(parse(with(good, "head_dim", 63)), "head_dim 63", "even");
  EXPECT_TITAN_ERROR(parse(with(good, "hidden_act", "gelu")), "hidden_act \"gelu\"");
  EXPECT_TITAN_ERROR(parse(with(good, "attention_bias", true)), "\"attention_bias\" is true", "has no biases");
  EXPECT_TITAN_ERROR(parse(with(good, "use_sliding_window", true)), "\"use_sliding_window\" is true",
                     "whole causal context");
  EXPECT_TITAN_ERROR(parse(with(good, "rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}})),
                     "\"rope_scaling.rope_type\" is \"yarn\"");
  EXPECT_TITAN_ERROR(parse(with(good, "rope_scaling", "yarn")), "\"rope_scaling\" must be an object or null");
  EXPECT_TITAN_ERROR(parse(with(good, "hidden_size", nullptr)), "\"hidden_size\" is missing");
  EXPECT_TITAN_ERROR(parse(with(good, "num_key_value_heads", nullptr)), "\"num_key_value_heads\" is missing");
  EXPECT_TITAN_ERROR(parse(with(good, "num_hidden_layers", "2")),
                     "\"num_hidden_layers\" must be an integer, got \"2\"");
  EXPECT_TITAN_ERROR(parse(with(good, "rms_norm_eps", "small")), "\"rms_norm_eps\" must be a number");
  EXPECT_TITAN_ERROR(parse(with(good, "tie_word_embeddings", 1)),
                     "\"tie_word_embeddings\" must be true or false");
  // The plain-RoPE spelling and transformers' defaults for absent keys are fine.
  EXPECT_NO_THROW(parse(with(good, "rope_scaling", json{{"rope_type", "default"}})));
  EXPECT_EQ(parse(with(good, "rms_norm_eps", nullptr)).norm_eps, 1e-6);
  EXPECT_EQ(parse(with(good, "rope_theta", nullptr)).rope_theta, 10000.0);
  if (family == Family::dense) {
    EXPECT_EQ(parse(with(good, "head_dim", nullptr)).head_dim, 128) << "Qwen3Config's default";
    return;
  }
  EXPECT_EQ(parse(with(good, "head_dim", nullptr)).head_dim, 32) << "hidden_size / num_attention_heads";
  EXPECT_FALSE(parse(with(good, "norm_topk_prob", nullptr)).moe->norm_topk_prob)
      << "Qwen3MoeConfig's default";
  EXPECT_TITAN_ERROR(parse(with(good, "decoder_sparse_step", 2)), "decoder_sparse_step is 2",
                     "mixture of experts in every layer");
  EXPECT_TITAN_ERROR(parse(with(good, "mlp_only_layers", json::array({1}))), "mlp_only_layers is [1]");
  EXPECT_TITAN_ERROR(parse(with(good, "mlp_only_layers", "none")),
                     "\"mlp_only_layers\" must be a list of integers");
  EXPECT_TITAN_ERROR(parse(with(good, "num_experts", nullptr)),
                     "\"num_local_experts\" (transformers 5) or \"num_experts\" (transformers 4) is missing",
                     "Qwen3MoeForCausalLM needs it");
  EXPECT_TITAN_ERROR(parse(with(good, "moe_intermediate_size", nullptr)),
                     "\"moe_intermediate_size\" is missing");
  EXPECT_TITAN_ERROR(parse(with(good, "num_experts_per_tok", 9)), "num_experts_per_tok (9)",
                     "num_experts_per_tok <= num_experts");
  EXPECT_TITAN_ERROR(parse(with(good, "norm_topk_prob", "true")), "\"norm_topk_prob\" must be true or false");
  EXPECT_TITAN_ERROR(parse(with(good, "router_aux_loss_coef", -0.1)),
                     "router_aux_loss_coef must not be negative");
}

// ---- HF folders and the commands --------------------------------------------------------------

// A folder of its own per test, removed unless the test failed.
class HfQwen3Folder : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    dir = test::fresh_temp_dir(std::string("hf_qwen3_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  fs::path dir;
};

INSTANTIATE_TEST_SUITE_P(Families, HfQwen3Folder, ::testing::Values(Family::dense, Family::moe),
                         [](const auto& info) { return std::string(qwen3::family_name(info.param)); });

TEST_P(HfQwen3Folder, ConvertToHfAndBackIsBitIdenticalWithIdenticalLogits) {
  ModelArgs args = debug_args(GetParam());
  // Tied in the dense case, so that a folder without lm_head goes both ways too.
  args.tie_embeddings = GetParam() == Family::dense;
  auto model = random_model(args, 4);
  checkpoint::Pieces pieces;
  for (const auto& [name, t] : model->state_dict()) pieces.emplace("model." + name, checkpoint::whole(t));
  json config = qwen3::to_hf_config(args);
  config["bos_token_id"] = 151643;
  checkpoint::save(dir / "step-5", pieces, {{"step", 5}, {"model_only", true}, {"hf_config", config}});

  train::export_hf_checkpoint(dir / "step-5", dir / "hf", kF32);
  const json written = read_json(dir / "hf" / "config.json");
  EXPECT_EQ(written["model_type"], qwen3::family_name(GetParam()));
  EXPECT_EQ(written["bos_token_id"], 151643) << "keys titan does not model are kept";
  EXPECT_EQ(written["tie_word_embeddings"], args.tie_embeddings);
  checkpoint::HfReader reader(dir / "hf");
  EXPECT_EQ(train::hf_family(reader).name, qwen3::family_name(GetParam()));
  const models::ModelConfig m = train::hf_model_config(reader);
  EXPECT_EQ(m.flavor, "debugmodel");
  EXPECT_EQ(m.weight_tying, args.tie_embeddings);

  train::import_hf_checkpoint(dir / "hf", dir / "back");
  const nn::StateDict back = test::titan_checkpoint_weights(dir / "back");
  test::expect_same_state(back, model->state_dict());
  EXPECT_EQ(checkpoint::read_metadata(dir / "back").state["hf_config"], written)
      << "the imported model is the folder's, its own keys kept";
  Transformer reloaded(args);
  reloaded.load_state_dict(back);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(test::same_bits(reloaded(tokens()), (*model)(tokens())));
}

// ---- training into and from HF folders ------------------------------------------------------------

// The family's debug config on a small corpus in `dir`, 16 tokens a sequence, checkpoints in dir/ckpt.
train::JobConfig job(Family family, const fs::path& dir, std::vector<std::string> extra) {
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 200; ++i)
      f << "In the beginning God created the heaven and the earth. " << i << "\n\n";
  }
  std::vector<std::string> o = {"--checkpoint.enable=true",
                                "--checkpoint.keep_latest_k=0",
                                "--training.dataset_path=" + (dir / "corpus.txt").string(),
                                "--training.seq_len=16",
                                "--training.local_batch_size=2",
                                "--training.steps=2",
                                "--lr_scheduler.warmup_steps=1",
                                "--metrics.log_freq=100",
                                "--metrics.enable_jsonl=false",
                                "--metrics.peak_flops=1e11",
                                "--job.dump_folder=" + (dir / "out").string(),
                                "--checkpoint.folder=" + (dir / "ckpt").string()};
  if (family == Family::moe) o.push_back("--moe.load_balance_bias=false");
  o.insert(o.end(), extra.begin(), extra.end());
  const std::string file = family == Family::dense ? "debug.toml" : "debug_moe.toml";
  return train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3/" + file, o);
}

train::TrainResult run(const train::JobConfig& cfg) {
  std::ostringstream log;
  return train::Trainer(cfg, log).train();
}

TEST_P(HfQwen3Folder, TrainingEndsInAnHfFolderThatSeedsAnotherRun) {
  const Family family = GetParam();
  run(job(family, dir, {}));
  const fs::path titan_export = dir / "titan-export";
  fs::rename(dir / "ckpt" / "step-2", titan_export);
  run(job(family, dir, {"--checkpoint.last_save_in_hf=true"}));
  const fs::path hf = dir / "ckpt" / "step-2";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf));
  // The same run trained the same weights: HF's names and layouts, turned back, bit for bit.
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(hf), std::nullopt), test::titan_checkpoint_weights(titan_export));
  // titan convert --to hf of the titan export writes that folder again, [moe] keys included.
  train::export_hf_checkpoint(titan_export, dir / "converted", kF32);
  EXPECT_EQ(read_json(dir / "converted" / "config.json"), read_json(hf / "config.json"));
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(dir / "converted"), std::nullopt),
                    test::titan_checkpoint_weights(titan_export));

  auto seeded = [&](const fs::path& from, const std::string& sub) {
    return run(job(
        family, dir,
        {"--checkpoint.folder=" + (dir / sub).string(), "--checkpoint.initial_load_path=" + from.string()}));
  };
  const train::TrainResult from_hf = seeded(hf, "from-hf"), from_titan = seeded(titan_export, "from-titan");
  ASSERT_EQ(from_hf.losses.size(), 2u);
  EXPECT_EQ(from_hf.losses, from_titan.losses) << "the HF export seeds a run as the titan export does";

  // The export is in transformers 5's layout unless the job asks for 4's; either seeds the run.
  const json v5 = read_json(hf / "config.json");
  EXPECT_EQ(models::common::hf::layout_of(v5), qwen3::ConfigLayout::transformers5);
  EXPECT_EQ(v5.value("dtype", json()), "float32");
  run(job(family, dir,
          {"--checkpoint.folder=" + (dir / "ckpt-v4").string(), "--checkpoint.last_save_in_hf=true",
           "--checkpoint.hf_config_format=transformers4"}));
  const fs::path hf_v4 = dir / "ckpt-v4" / "step-2";
  const json v4 = read_json(hf_v4 / "config.json");
  EXPECT_FALSE(v4.contains("rope_parameters"));
  EXPECT_FALSE(v4.contains("dtype"));
  EXPECT_EQ(v4.value("rope_theta", json()), v5["rope_parameters"]["rope_theta"]);
  EXPECT_EQ(v4.value("torch_dtype", json()), "float32");
  if (family == Family::moe) {
    EXPECT_EQ(v4.value("num_experts", json()), v5["num_local_experts"]);
  }
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(hf_v4), std::nullopt),
                          test::titan_checkpoint_weights(titan_export));
  EXPECT_EQ(seeded(hf_v4, "from-hf-v4").losses, from_hf.losses);
}

TEST(HfQwen3, SeedingFromAFolderTiedOtherwiseNamesTheKeyToSet) {
  const fs::path dir = test::fresh_temp_dir("hf_qwen3_tying");
  run(job(Family::dense, dir, {"--model.weight_tying=true", "--checkpoint.last_save_in_hf=true"}));
  const fs::path hf = dir / "ckpt" / "step-2";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf));
  std::ostringstream log;
  EXPECT_TITAN_ERROR(train::Trainer(job(Family::dense, dir,
                                        {"--model.weight_tying=false", "--checkpoint.folder=" + (dir / "seeded").string(),
                                         "--checkpoint.initial_load_path=" + hf.string()}),
                                    log),
                     "tie_word_embeddings", "--model.weight_tying=true");
  fs::remove_all(dir);
}

TEST(HfQwen3Moe, ARunWithTheExpertBiasStartsFromAnHfFolderWithTheBiasAtZero) {
  const fs::path dir = test::fresh_temp_dir("hf_qwen3_seed_expert_bias");
  run(job(Family::moe, dir, {"--checkpoint.last_save_in_hf=true"}));
  const fs::path hf = dir / "ckpt" / "step-2";
  ASSERT_TRUE(checkpoint::is_hf_dir(hf));
  auto seeded = [&](bool bias, const std::string& sub, std::ostream& log) {
    return train::Trainer(job(Family::moe, dir,
                              {"--moe.load_balance_bias=" + std::string(bias ? "true" : "false"),
                               "--checkpoint.folder=" + (dir / sub).string(),
                               "--checkpoint.initial_load_path=" + hf.string()}),
                          log)
        .train();
  };
  std::ostringstream log_bias, log_plain;
  const train::TrainResult with_bias = seeded(true, "with-bias", log_bias);
  const train::TrainResult without = seeded(false, "without", log_plain);
  ASSERT_EQ(with_bias.losses.size(), 2u);
  ASSERT_EQ(without.losses.size(), 2u);
  // A zero bias routes as HF does, so the first step is the bias-free run's, bit for bit.
  EXPECT_EQ(with_bias.losses[0], without.losses[0]);
  EXPECT_NE(log_bias.str().find("keep their initial values (layers.0.moe.router.expert_bias"), std::string::npos)
      << log_bias.str();
  EXPECT_EQ(log_plain.str().find("keep their initial values"), std::string::npos) << log_plain.str();
  fs::remove_all(dir);
}

TEST(HfQwen3Moe, ARunWithTheExpertBiasRefusesAnHfExportBeforeTraining) {
  const fs::path dir = test::fresh_temp_dir("hf_qwen3_expert_bias");
  std::ostringstream log;
  EXPECT_TITAN_ERROR(
      train::Trainer(
          job(Family::moe, dir, {"--moe.load_balance_bias=true", "--checkpoint.last_save_in_hf=true"}), log),
      "chooses experts without a bias", "--moe.load_balance_bias=false");
  EXPECT_EQ(log.str().find("step 1/"), std::string::npos) << "no step before the error: " << log.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan
