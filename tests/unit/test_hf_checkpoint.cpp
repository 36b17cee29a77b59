// Hugging Face interop of Llama 3: the state dict adapter (names, the q/k row order RoPE's
// layouts need, config.json), HF folders on disk (single file, shards, damaged ones) and the
// conversions titan -> HF -> titan. transformers itself checks the same folders in
// tests/parity/test_parity_hf_interop.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/rng.h"
#include "titan/models/registry.h"
#include "titan/models/llama3/model.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/ops/linalg.h"
#include "titan/ops/rope.h"
#include "titan/train/config/job_config.h"
#include "titan/train/hf_interop.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::llama3::ModelArgs;
using models::llama3::Transformer;
namespace llama3 = models::llama3;

// Grouped-query attention (4 heads, 2 kv heads of 8 dims), RoPE scaling with factors that are
// not the defaults, so that every field of config.json matters.
ModelArgs tiny_args() {
  ModelArgs a;
  a.dim = 32;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 48;
  a.ffn_dim = 40;
  a.norm_eps = 1e-6;
  a.rope_theta = 10000;
  a.rope_scaling = {.factor = 4, .low_freq_factor = 1, .high_freq_factor = 2, .original_max_position = 16};
  a.max_seq_len = 16;
  return a;
}

// A model with random weights everywhere, norms included (ones would hide a swapped norm).
std::unique_ptr<Transformer> tiny_model(uint64_t seed) {
  auto m = std::make_unique<Transformer>(tiny_args());
  autograd::NoGradGuard no_grad;
  uint64_t s = seed;
  for (auto& [name, p] : m->named_parameters()) p.copy_(test::rand_f32(p.sizes(), s++, -0.5, 0.5));
  return m;
}

Tensor tokens() {
  return Tensor::from_vector<int64_t>({3, 17, 40, 2, 9, 9, 31, 0, 47, 12, 5, 28}, {2, 6});
}

// A folder of its own per test, removed unless the test failed.
class HfFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir(std::string("hf_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  fs::path dir;
};

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(2);
}

// ---- the adapter ------------------------------------------------------------------------------

TEST(HfLlama3Adapter, QkRowsMoveFromPairsToHalvesPerHead) {
  // Row r holds the value r, so the result lists which row went where.
  const int64_t heads = 2, head_dim = 6, in = 3;
  std::vector<float> v;
  for (int64_t r = 0; r < heads * head_dim; ++r)
    for (int64_t c = 0; c < in; ++c) v.push_back(static_cast<float>(r));
  Tensor w = Tensor::from_vector<float>(v, {heads * head_dim, in});
  Tensor half = llama3::interleaved_to_half(w, heads);
  // Per head: rows 0, 2, 4 (the pairs' first dims) then 1, 3, 5.
  const std::vector<float> want_rows = {0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11};
  for (int64_t r = 0; r < heads * head_dim; ++r)
    EXPECT_EQ(half.narrow(0, r, 1).to_vector<float>()[0], want_rows[static_cast<size_t>(r)]) << "row " << r;
  EXPECT_TRUE(test::same_bits(llama3::half_to_interleaved(half, heads), w));
  EXPECT_TITAN_ERROR(llama3::interleaved_to_half(w, 5), "n_heads = 5");
}

// The permutation's reason, checked with titan's own RoPE in both layouts: HF's rotate-half
// RoPE of the permuted projection gives our interleaved RoPE's numbers, moved the same way, so
// q.k per head (and attention) is unchanged.
TEST(HfLlama3Adapter, PermutedProjectionUnderRotateHalfEqualsInterleavedRope) {
  const int64_t heads = 3, head_dim = 8, dim = 12, seq = 5;
  Tensor w = test::rand_f32({heads * head_dim, dim}, 1);
  Tensor x = test::rand_f32({1, seq, dim}, 2);
  const ops::RopeTable table = ops::RopeTable::build(head_dim, seq, 10000.0);
  auto project = [&](const Tensor& weight) {
    return ops::matmul(x, weight.transpose(0, 1)).view({1, seq, heads, head_dim});
  };
  Tensor ours = ops::rope(project(w), table, ops::RopeLayout::interleaved);
  Tensor hf = ops::rope(project(llama3::interleaved_to_half(w, heads)), table, ops::RopeLayout::rotate_half);
  // Our rotated dims, permuted per head as the rows were.
  Tensor ours_moved = ours.view({1, seq, heads, head_dim / 2, 2})
                          .transpose(3, 4)
                          .contiguous()
                          .view({1, seq, heads, head_dim});
  EXPECT_TRUE(test::tensors_close(hf, ours_moved, 1e-6, "rotate-half RoPE of the permuted projection"));
}

TEST(HfLlama3Adapter, NamesAndShapesAreLlamaForCausalLMs) {
  auto model = tiny_model(1);
  const nn::StateDict ours = model->state_dict();
  const nn::StateDict hf = llama3::to_hf(ours, tiny_args());
  const auto shapes = llama3::hf_shapes(llama3::parse_hf_config(llama3::to_hf_config(tiny_args())));
  ASSERT_EQ(hf.size(), shapes.size());
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(hf.count(name)) << name;
    EXPECT_EQ(hf.at(name).sizes(), shape) << name;
  }
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.1.mlp.gate_proj.weight"), ours.at("layers.1.feed_forward.w1.weight")));
  EXPECT_TRUE(
      test::same_bits(hf.at("model.layers.1.mlp.up_proj.weight"), ours.at("layers.1.feed_forward.w3.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("model.layers.0.post_attention_layernorm.weight"),
                        ours.at("layers.0.ffn_norm.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("lm_head.weight"), ours.at("output.weight")));
  EXPECT_TRUE(test::same_bits(hf.at("model.layers.0.self_attn.k_proj.weight"),
                        llama3::interleaved_to_half(ours.at("layers.0.attention.wk.weight"), 2)));
  test::expect_same_state(llama3::from_hf(hf, llama3::parse_hf_config(llama3::to_hf_config(tiny_args()))), ours);

  nn::StateDict foreign = hf;
  foreign["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor::zeros({4});
  EXPECT_TITAN_ERROR(llama3::from_hf(foreign, llama3::parse_hf_config(llama3::to_hf_config(tiny_args()))),
                     "'model.layers.0.self_attn.rotary_emb.inv_freq' is not one of LlamaForCausalLM's");
}

TEST(HfLlama3Adapter, ConfigRoundTripsAndFindsFlavors) {
  const json c = llama3::to_hf_config(tiny_args());
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["intermediate_size"], 40);
  EXPECT_EQ(c["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(c["rope_parameters"]["original_max_position_embeddings"], 16);
  const ModelArgs a = llama3::parse_hf_config(c).args, want = tiny_args();
  EXPECT_EQ(a.dim, want.dim);
  EXPECT_EQ(a.n_layers, want.n_layers);
  EXPECT_EQ(a.n_heads, want.n_heads);
  EXPECT_EQ(a.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(a.ffn_hidden_dim(), want.ffn_hidden_dim());
  EXPECT_EQ(a.vocab_size, want.vocab_size);
  EXPECT_EQ(a.norm_eps, want.norm_eps);
  EXPECT_EQ(a.rope_theta, want.rope_theta);
  EXPECT_TRUE(a.use_scaled_rope);
  EXPECT_EQ(a.rope_scaling.factor, 4);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, 2);
  EXPECT_EQ(a.rope_scaling.original_max_position, 16);
  EXPECT_EQ(a.max_seq_len, 16);

  for (const std::string& name : llama3::flavor_names()) {
    const models::ModelConfig m =
        llama3::matching_flavor(llama3::parse_hf_config(llama3::to_hf_config(llama3::flavor(name))));
    EXPECT_EQ(m.flavor, name);
    EXPECT_EQ(m.vocab_size, llama3::flavor(name).vocab_size);
  }
  // Meta's Llama 3.1 8B config.json, as published on the hub (older "type" spelling kept out).
  const json meta_8b = json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})");
  EXPECT_EQ(llama3::matching_flavor(llama3::parse_hf_config(meta_8b)).flavor, "8B");
  EXPECT_TITAN_ERROR(llama3::matching_flavor(llama3::parse_hf_config(c)), "describes no llama3 flavor",
                     "the closest, debugmodel, differs in",
                     "num_hidden_layers (config.json 2, debugmodel 6)");
  json no_scaling = llama3::to_hf_config(tiny_args(), llama3::ConfigLayout::transformers4);
  no_scaling["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_FALSE(llama3::parse_hf_config(no_scaling).args.use_scaled_rope);
}

TEST(HfLlama3Adapter, ConfigsItCannotComputeAreErrorsNamingTheKey) {
  const json good = llama3::to_hf_config(tiny_args(), llama3::ConfigLayout::transformers4);
  auto with = [&](const char* key, const json& value) {
    json c = good;
    if (value.is_null())
      c.erase(key);
    else
      c[key] = value;
    return c;
  };
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("num_attention_heads", 5)),
                     "num_attention_heads (5) must divide hidden_size (32)");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("num_key_value_heads", 3)),
                     "num_key_value_heads (3) must divide num_attention_heads (4)");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("head_dim", 16)), "head_dim 16",
                     "hidden_size / num_attention_heads = 8");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("hidden_size", nullptr)), "\"hidden_size\" is missing");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("num_hidden_layers", "2")),
                     "\"num_hidden_layers\" must be an integer, got \"2\"");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("model_type", "mistral")), "model_type is \"mistral\"");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("hidden_act", "gelu")), "hidden_act \"gelu\"");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("attention_bias", true)), "\"attention_bias\" is true",
                     "has no biases");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(with("rope_scaling", json{{"type", "yarn"}, {"factor", 4}})),
                     "\"rope_scaling.type\" is \"yarn\"");
  EXPECT_TITAN_ERROR(
      llama3::parse_hf_config(with("rope_scaling", json{{"rope_type", "llama3"}, {"factor", 4}})),
      "\"rope_scaling.low_freq_factor\" is missing");
}

TEST(HfLlama3Adapter, TiedEmbeddingsImportAsAnUntiedCopy) {
  json c = llama3::to_hf_config(tiny_args());
  c["tie_word_embeddings"] = true;
  const llama3::HfConfig tied = llama3::parse_hf_config(c);
  EXPECT_FALSE(llama3::hf_shapes(tied).count("lm_head.weight"));
  nn::StateDict hf = llama3::to_hf(tiny_model(2)->state_dict(), tiny_args());
  hf.erase("lm_head.weight");
  const nn::StateDict ours = llama3::from_hf(hf, tied);
  EXPECT_TRUE(test::same_bits(ours.at("output.weight"), ours.at("tok_embeddings.weight")));
  EXPECT_FALSE(ours.at("output.weight").is_same(ours.at("tok_embeddings.weight")));
}

// ---- HF folders ---------------------------------------------------------------------------------

const models::StateDictAdapter& adapter() {
  return models::hf_adapter("llama3");
}

// The tiny model as a titan checkpoint that names its model by config.json (as convert --to
// titan writes them).
void save_titan(const fs::path& step_dir, const Transformer& model) {
  checkpoint::Pieces pieces;
  for (const auto& [name, t] : model.state_dict()) pieces.emplace("model." + name, checkpoint::whole(t));
  checkpoint::save(step_dir, pieces,
                   {{"step", 7}, {"model_only", true}, {"hf_config", llama3::to_hf_config(tiny_args())}});
}

TEST_F(HfFolder, TitanToHfToTitanIsBitIdenticalWithIdenticalLogits) {
  auto model = tiny_model(3);
  save_titan(dir / "step-7", *model);
  train::export_hf_checkpoint(dir / "step-7", dir / "hf", kF32);
  EXPECT_TRUE(checkpoint::is_hf_dir(dir / "hf"));
  const json config = read_json(dir / "hf" / "config.json");
  EXPECT_EQ(config["dtype"], "float32");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  checkpoint::SafetensorsReader weights((dir / "hf" / "model.safetensors").string());
  EXPECT_EQ(weights.metadata().at("format"), "pt");
  EXPECT_EQ(weights.entry("model.layers.1.self_attn.q_proj.weight").dtype, kF32);

  train::import_hf_checkpoint(dir / "hf", dir / "back");
  const nn::StateDict back = test::titan_checkpoint_weights(dir / "back");
  test::expect_same_state(back, model->state_dict());
  EXPECT_TRUE(checkpoint::read_metadata(dir / "back").state["model_only"].get<bool>());

  Transformer reloaded(tiny_args());
  reloaded.load_state_dict(back);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(test::same_bits(reloaded(tokens()), (*model)(tokens())));
}

// A checkpoint of titan train names its model by the job config, whose overrides of the flavor
// (depth, vocabulary) the export keeps.
TEST_F(HfFolder, ExportOfATrainedCheckpointKeepsTheConfigsDepthAndVocabulary) {
  train::JobConfig job;
  job.model.flavor = "debugmodel";
  job.model.n_layers = 1;
  job.model.vocab_size = 259;
  Generator gen(2);
  const auto model = models::get_train_spec("llama3").build(job.model, 64, gen);
  checkpoint::Pieces pieces;
  for (const auto& [name, t] : model->state_dict()) pieces.emplace("model." + name, checkpoint::whole(t));
  checkpoint::save(dir / "step-3", pieces, {{"step", 3}, {"model_only", true}, {"config", train::to_json(job)}});
  train::export_hf_checkpoint(dir / "step-3", dir / "hf", kF32);
  const json config = read_json(dir / "hf" / "config.json");
  EXPECT_EQ(config["num_hidden_layers"], 1);
  EXPECT_EQ(config["vocab_size"], 259);
}

TEST_F(HfFolder, Bf16ExportRoundsOnceAndImportsAsStored) {
  auto model = tiny_model(4);
  save_titan(dir / "step-7", *model);
  train::export_hf_checkpoint(dir / "step-7", dir / "hf", kBF16);
  EXPECT_EQ(read_json(dir / "hf" / "config.json")["dtype"], "bfloat16");
  checkpoint::HfReader reader(dir / "hf");
  const nn::StateDict bf16 = train::load_hf_state(reader, std::nullopt);
  const nn::StateDict f32 = train::load_hf_state(reader, kF32);
  for (const auto& [name, t] : model->state_dict()) {
    EXPECT_TRUE(test::same_bits(bf16.at(name), t.detach().to(kBF16))) << name;
    EXPECT_TRUE(test::same_bits(f32.at(name), t.detach().to(kBF16).to(kF32))) << name;
  }
}

TEST_F(HfFolder, ShardedFoldersAreReadThroughTheirIndex) {
  auto model = tiny_model(5);
  const json config = llama3::to_hf_config(tiny_args());
  const nn::StateDict hf = llama3::to_hf(model->state_dict(), tiny_args());
  // Layer 0 and the embedding in one file, the rest in another.
  std::map<std::string, Tensor> first, second;
  json weight_map = json::object();
  for (const auto& [name, t] : hf) {
    const bool in_first = name.starts_with("model.layers.0.") || name == "model.embed_tokens.weight";
    const std::string file =
        in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (in_first ? first : second).emplace(name, t);
    weight_map[name] = file;
  }
  const fs::path f = dir / "sharded";
  fs::create_directories(f);
  write_json(f / "config.json", config);
  checkpoint::write_safetensors((f / "model-00001-of-00002.safetensors").string(), first);
  checkpoint::write_safetensors((f / "model-00002-of-00002.safetensors").string(), second);
  write_json(f / "model.safetensors.index.json",
             {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(f), std::nullopt, "llama3"),
                          model->state_dict());

  // The index names a file that is not there; puts a tensor in the wrong file; leaves one out.
  json broken = weight_map;
  broken["model.norm.weight"] = "model-00003-of-00003.safetensors";
  write_json(f / "model.safetensors.index.json", {{"weight_map", broken}});
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "model-00003-of-00003.safetensors is missing");
  broken = weight_map;
  broken["model.norm.weight"] = "model-00001-of-00002.safetensors";
  write_json(f / "model.safetensors.index.json", {{"weight_map", broken}});
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "does not match its shard files",
                     "tensor 'model.norm.weight' is not in model-00001-of-00002.safetensors");
  broken = weight_map;
  broken.erase("lm_head.weight");
  write_json(f / "model.safetensors.index.json", {{"weight_map", broken}});
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f},
                     "tensor 'lm_head.weight' is in model-00002-of-00002.safetensors but not in the index");
  broken = weight_map;
  broken["lm_head.weight"] = "../elsewhere.safetensors";
  write_json(f / "model.safetensors.index.json", {{"weight_map", broken}});
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "not the name of a file in the folder");
}

// A tied Llama of no llama3 flavor is the hf family's, which keeps it tied: convert's round trip
// gives the folder back (llama3's flavors import untied: TiedEmbeddingsImportAsAnUntiedCopy).
TEST_F(HfFolder, TiedCheckpointOfNoFlavorConvertsToTitanAndBackTied) {
  json config = llama3::to_hf_config(tiny_args());
  config["tie_word_embeddings"] = true;
  config["bos_token_id"] = 5;
  nn::StateDict hf = llama3::to_hf(tiny_model(9)->state_dict(), tiny_args());
  hf.erase("lm_head.weight");
  const fs::path tied = dir / "tied";
  fs::create_directories(tied);
  write_json(tied / "config.json", config);
  checkpoint::write_safetensors((tied / "model.safetensors").string(), hf);

  train::import_hf_checkpoint(tied, dir / "titan");
  EXPECT_EQ(checkpoint::read_metadata(dir / "titan").state.value("model_name", ""), "hf");
  train::export_hf_checkpoint(dir / "titan", dir / "back", kF32);
  const json exported = read_json(dir / "back" / "config.json");
  EXPECT_EQ(exported["tie_word_embeddings"], true);
  EXPECT_EQ(exported["bos_token_id"], 5) << "keys titan does not model are kept";
  checkpoint::SafetensorsFile f = checkpoint::read_safetensors((dir / "back" / "model.safetensors").string());
  EXPECT_FALSE(f.tensors.count("lm_head.weight"));
  for (const auto& [name, t] : hf) EXPECT_TRUE(test::same_bits(f.tensors.at(name), t)) << name;
}

TEST_F(HfFolder, MissingExtraAndMisshapedTensorsAreNamedWithTheirFile) {
  auto model = tiny_model(6);
  const json config = llama3::to_hf_config(tiny_args());
  nn::StateDict hf = llama3::to_hf(model->state_dict(), tiny_args());
  hf.erase("model.layers.1.mlp.down_proj.weight");
  hf["model.layers.0.input_layernorm.weight"] = Tensor::zeros({31});
  hf["model.layers.0.self_attn.q_proj.bias"] = Tensor::zeros({32});
  const fs::path f = dir / "bad";
  fs::create_directories(f);
  write_json(f / "config.json", config);
  checkpoint::write_safetensors((f / "model.safetensors").string(), hf);
  EXPECT_TITAN_ERROR(
      train::load_hf_state(checkpoint::HfReader(f), std::nullopt, "llama3"), f.string(),
      "does not hold the model its config.json describes",
      "missing tensor 'model.layers.1.mlp.down_proj.weight' (expected shape [32, 40])",
      "tensor 'model.layers.0.input_layernorm.weight' in model.safetensors is f32[31], expected "
      "shape [32]",
      "unexpected tensor 'model.layers.0.self_attn.q_proj.bias' in model.safetensors");

  // config.json that contradicts itself, or names no family titan has.
  json bad_config = config;
  bad_config["num_key_value_heads"] = 3;
  write_json(f / "config.json", bad_config);
  EXPECT_TITAN_ERROR(train::load_hf_state(checkpoint::HfReader(f), std::nullopt, "llama3"), f.string(),
                     "num_key_value_heads (3) must divide num_attention_heads (4)");
  EXPECT_TITAN_ERROR(train::load_hf_state(checkpoint::HfReader(f), std::nullopt), f.string(),
                     "num_attention_heads (4) must be a multiple of num_key_value_heads (3)");
  bad_config = config;
  bad_config["model_type"] = "gpt2";
  write_json(f / "config.json", bad_config);
  EXPECT_TITAN_ERROR(train::load_hf_state(checkpoint::HfReader(f), std::nullopt), "config.json",
                     "model_type \"gpt2\" is not one titan reads", "llama3 (\"llama\")",
                     "hf (\"gemma\", \"gemma2\"");
  std::ofstream(f / "config.json") << "{\"model_type\": ";
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "config.json: not valid JSON");
  fs::remove(f / "config.json");
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "no config.json");
  write_json(f / "config.json", config);
  fs::remove(f / "model.safetensors");
  EXPECT_TITAN_ERROR(checkpoint::HfReader{f}, "neither model.safetensors nor model.safetensors.index.json");
}

TEST_F(HfFolder, ExportRefusesWeightsThatContradictConfigAndReplacesAtomically) {
  auto model = tiny_model(7);
  const json config = llama3::to_hf_config(tiny_args());
  nn::StateDict ours = model->state_dict();
  ours.erase("norm.weight");
  EXPECT_TITAN_ERROR(train::save_hf_model(dir / "hf", adapter(), config, ours, kF32),
                     "the weights do not fit the model config.json describes",
                     "missing tensor 'model.norm.weight'");
  EXPECT_FALSE(fs::exists(dir / "hf"));

  train::save_hf_model(dir / "hf", adapter(), config, model->state_dict(), kF32);
  auto other = tiny_model(8);
  train::save_hf_model(dir / "hf", adapter(), config, other->state_dict(), kBF16);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"hf"}) << "a staging folder was left behind";
  test::expect_same_state(train::load_hf_state(checkpoint::HfReader(dir / "hf"), kF32, "llama3"), [&] {
    nn::StateDict s;
    for (const auto& [n, t] : other->state_dict()) s[n] = t.detach().to(kBF16).to(kF32);
    return s;
  }());
}

}  // namespace
}  // namespace titan
