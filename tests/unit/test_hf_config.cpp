// config.json in transformers 4's layout (top-level rope_theta and rope_scaling, torch_dtype,
// num_experts) and 5's (rope_parameters, dtype, num_local_experts), read and written for Llama 3,
// Qwen 3 and Qwen 3 MoE. The fixtures (tests/fixtures/hf_config, see its README) describe the
// same four tiny models in both layouts; the 5.x files are transformers 5.24's own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/models/qwen3/state_dict_adapter.h"
#include "titan/train/hf_interop.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
namespace hf = models::common::hf;
namespace llama3 = models::llama3;
namespace qwen3 = models::qwen3;
using hf::ConfigLayout;
using json = nlohmann::json;

constexpr ConfigLayout kV4 = ConfigLayout::transformers4, kV5 = ConfigLayout::transformers5;
constexpr ConfigLayout kLayouts[] = {kV4, kV5};

// The fixture of `model` ("llama", "llama3_scaled", "qwen3", "qwen3_moe") in `layout`.
json fixture(const std::string& model, ConfigLayout layout) {
  const fs::path path = fs::path(TITAN_SOURCE_DIR) / "tests" / "fixtures" / "hf_config" /
                        hf::layout_name(layout) / (model + ".json");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

qwen3::Family qwen3_family(const std::string& model) {
  return model == "qwen3" ? qwen3::Family::dense : qwen3::Family::moe;
}

// The model `config` describes, written by titan in `layout`.
json rewritten(const std::string& model, const json& config, ConfigLayout layout) {
  if (model.starts_with("llama")) return llama3::to_hf_config(llama3::parse_hf_config(config).args, layout);
  return qwen3::to_hf_config(qwen3::parse_hf_config(qwen3_family(model), config), layout);
}

const models::StateDictAdapter& adapter_of(const json& config) {
  return *models::train_spec_for_hf(config, "config.json").state_dict_adapter;
}

// The keys only one layout has, by layout.
std::vector<std::string> layout_keys(ConfigLayout layout) {
  if (layout == kV5) return {"rope_parameters", hf::kDtypeKey.v5, hf::kNumExpertsKey.v5};
  return {"rope_theta", "rope_scaling", hf::kDtypeKey.v4, hf::kNumExpertsKey.v4};
}

ConfigLayout other(ConfigLayout layout) {
  return layout == kV4 ? kV5 : kV4;
}

class HfConfigLayouts : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Models, HfConfigLayouts,
                         ::testing::Values("llama", "llama3_scaled", "qwen3", "qwen3_moe"),
                         [](const auto& info) { return info.param; });

TEST_P(HfConfigLayouts, BothLayoutsDescribeTheSameModel) {
  const std::string model = GetParam();
  const json v4 = fixture(model, kV4), v5 = fixture(model, kV5);
  EXPECT_EQ(hf::layout_of(v4), kV4);
  EXPECT_EQ(hf::layout_of(v5), kV5);
  for (ConfigLayout layout : kLayouts)
    EXPECT_EQ(rewritten(model, v4, layout), rewritten(model, v5, layout)) << hf::layout_name(layout);
}

TEST(HfConfig, TheValuesOfEitherLayoutAreRead) {
  for (ConfigLayout layout : kLayouts) {
    const std::string name = hf::layout_name(layout);
    const llama3::ModelArgs scaled = llama3::parse_hf_config(fixture("llama3_scaled", layout)).args;
    EXPECT_EQ(scaled.rope_theta, 500000.0) << name;
    EXPECT_TRUE(scaled.use_scaled_rope) << name;
    EXPECT_EQ(scaled.rope_scaling.factor, 4.0) << name;
    EXPECT_EQ(scaled.rope_scaling.low_freq_factor, 1.0) << name;
    EXPECT_EQ(scaled.rope_scaling.high_freq_factor, 2.0) << name;
    EXPECT_EQ(scaled.rope_scaling.original_max_position, 64) << name;
    EXPECT_EQ(scaled.max_seq_len, 256) << name;
    const llama3::ModelArgs plain = llama3::parse_hf_config(fixture("llama", layout)).args;
    EXPECT_EQ(plain.rope_theta, 500000.0) << name;
    EXPECT_FALSE(plain.use_scaled_rope) << name;
    const qwen3::ModelArgs dense = qwen3::parse_hf_config(qwen3::Family::dense, fixture("qwen3", layout));
    EXPECT_EQ(dense.rope_theta, 1e6) << name;
    EXPECT_EQ(dense.head_dim, 16) << name;
    EXPECT_FALSE(dense.moe) << name;
    const qwen3::ModelArgs moe = qwen3::parse_hf_config(qwen3::Family::moe, fixture("qwen3_moe", layout));
    EXPECT_EQ(moe.rope_theta, 1e6) << name;
    ASSERT_TRUE(moe.moe) << name;
    EXPECT_EQ(moe.moe->num_experts, 4) << name;
    EXPECT_EQ(moe.moe->top_k, 2) << name;
    EXPECT_TRUE(moe.moe->norm_topk_prob) << name;
  }
  // The kind's spelling before transformers 4.45.
  json older = fixture("llama3_scaled", kV4);
  older["rope_scaling"].erase("rope_type");
  older["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(llama3::parse_hf_config(older).args.rope_scaling.factor, 4.0);
}

TEST_P(HfConfigLayouts, EachLayoutIsWrittenAsTransformersWritesIt) {
  const std::string model = GetParam();
  for (ConfigLayout layout : kLayouts) {
    const std::string name = hf::layout_name(layout);
    const json ours = rewritten(model, fixture(model, kV5), layout), theirs = fixture(model, layout);
    EXPECT_EQ(hf::layout_of(ours), layout);
    // Every key titan writes is one transformers writes, with its value.
    for (const auto& [key, value] : ours.items()) {
      ASSERT_TRUE(theirs.contains(key)) << name << " has no \"" << key << "\"";
      EXPECT_EQ(value, theirs.at(key)) << name << " \"" << key << "\"";
    }
    // Of the keys that differ between the layouts, exactly this layout's (dtype aside: the
    // writer adds it).
    for (const std::string& key : layout_keys(layout)) {
      if (key != hf::kDtypeKey.in(layout)) {
        EXPECT_EQ(ours.contains(key), theirs.contains(key)) << name << " " << key;
      }
    }
    for (const std::string& key : layout_keys(other(layout)))
      EXPECT_FALSE(ours.contains(key)) << name << " " << key;
    EXPECT_EQ(ours.contains("layer_types"), theirs.contains("layer_types")) << name;
  }
}

TEST_P(HfConfigLayouts, ImportKeepsTheFilesKeysInTheLayoutAsked) {
  const std::string model = GetParam();
  for (ConfigLayout from : kLayouts)
    for (ConfigLayout to : kLayouts) {
      const std::string name = std::string(hf::layout_name(from)) + " -> " + hf::layout_name(to);
      const json file = fixture(model, from);
      const json out = adapter_of(file).imported_hf_config(file, to);
      EXPECT_EQ(hf::layout_of(out), to) << name;
      for (const std::string& key : layout_keys(other(to)))
        EXPECT_FALSE(out.contains(key)) << name << " " << key;
      EXPECT_EQ(out.value(hf::kDtypeKey.in(to), json()), "bfloat16")
          << name << ": the file's dtype, under this layout's key";
      EXPECT_EQ(out.value("initializer_range", json()), 0.02)
          << name << ": keys titan does not model are kept";
      EXPECT_EQ(rewritten(model, out, kV5), rewritten(model, fixture(model, kV5), kV5)) << name;
      if (from == to) {
        EXPECT_EQ(out, file) << name;
      }
    }
}

TEST(HfConfig, BothLayoutsInOneFileAreReadWhenTheyAgree) {
  for (const std::string model : {"llama", "llama3_scaled", "qwen3", "qwen3_moe"}) {
    json both = fixture(model, kV5);
    both.update(fixture(model, kV4));
    EXPECT_EQ(rewritten(model, both, kV5), rewritten(model, fixture(model, kV5), kV5)) << model;
  }
  json older = fixture("llama3_scaled", kV5);
  older.update(fixture("llama3_scaled", kV4));
  older["rope_scaling"].erase("rope_type");
  older["rope_scaling"]["type"] = "llama3";
  EXPECT_TRUE(llama3::parse_hf_config(older).args.use_scaled_rope);
}

TEST(HfConfig, LayoutsThatDisagreeAreRefusedNamingBothKeys) {
  const json scaled = fixture("llama3_scaled", kV5);
  auto parse_llama = [](const json& c) { return llama3::parse_hf_config(c); };
  json theta = scaled;
  theta["rope_theta"] = 10000.0;
  theta["rope_scaling"] = fixture("llama3_scaled", kV4)["rope_scaling"];
  EXPECT_TITAN_ERROR(
      parse_llama(theta),
      "config.json: \"rope_theta\" (10000.0) and \"rope_parameters.rope_theta\" (500000.0) disagree",
      "keep those of the version that wrote the weights");
  json factor = fixture("llama3_scaled", kV4);
  factor["rope_parameters"] = scaled["rope_parameters"];
  factor["rope_parameters"]["factor"] = 8.0;
  EXPECT_TITAN_ERROR(parse_llama(factor),
                     "\"rope_scaling.factor\" (4.0) and \"rope_parameters.factor\" (8.0) disagree");
  // 4.x's keys without scaling, 5.x's with it.
  json kind = scaled;
  kind["rope_theta"] = 500000.0;
  EXPECT_TITAN_ERROR(parse_llama(kind),
                     "\"rope_scaling\" (null) and \"rope_parameters.rope_type\" (\"llama3\") disagree",
                     "\"rope_scaling.factor\" (absent) and \"rope_parameters.factor\" (4.0) disagree");

  json experts = fixture("qwen3_moe", kV5);
  experts["num_experts"] = 8;
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::moe, experts),
                     "config.json: \"num_experts\" (8) and \"num_local_experts\" (4) disagree");
  json dtype = fixture("qwen3", kV5);
  dtype["torch_dtype"] = "float32";
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::dense, dtype),
                     "config.json: \"torch_dtype\" (\"float32\") and \"dtype\" (\"bfloat16\") disagree");
  // Through the registry's adapter, as titan convert and initial_load_path read folders.
  EXPECT_TITAN_ERROR(adapter_of(theta).hf_shapes(theta), "\"rope_theta\" (10000.0)");
}

TEST(HfConfig, RopeItCannotComputeIsRefusedNamingTheFilesKey) {
  json yarn = fixture("llama3_scaled", kV5);
  yarn["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(yarn), "config.json: \"rope_parameters.rope_type\" is \"yarn\"",
                     "\"llama3\" RoPE scaling, or none");
  json scaled_qwen = fixture("qwen3", kV5);
  scaled_qwen["rope_parameters"]["rope_type"] = "llama3";
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::dense, scaled_qwen),
                     "\"rope_parameters.rope_type\" is \"llama3\"", "plain RoPE");
  json missing = fixture("llama3_scaled", kV5);
  missing["rope_parameters"].erase("low_freq_factor");
  EXPECT_TITAN_ERROR(llama3::parse_hf_config(missing), "\"rope_parameters.low_freq_factor\" is missing");
  json per_layer = fixture("qwen3", kV5);
  per_layer["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::dense, per_layer),
                     "\"rope_parameters.full_attention\" is an object");
  json windows = fixture("qwen3", kV5);
  windows["layer_types"][1] = "sliding_attention";
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::dense, windows),
                     "\"layer_types\" holds \"sliding_attention\"");
  json no_experts = fixture("qwen3_moe", kV5);
  no_experts.erase("num_local_experts");
  EXPECT_TITAN_ERROR(qwen3::parse_hf_config(qwen3::Family::moe, no_experts),
                     "\"num_local_experts\" (transformers 5) or \"num_experts\" (transformers 4) is missing");
}

// A file's value is a user's input: the refusal names the key, what it holds and what titan reads,
// and none of titan's own check expressions or source files.
TEST(HfConfig, RefusedValuesAreNamedByTheFilesKeyWithoutTitansSource) {
  const auto refusal = [](const std::function<void()>& parse) {
    try {
      parse();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("[check"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(".cpp"), std::string::npos) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "not refused";
    return std::string();
  };
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    json biased = fixture("llama", kV5);
    biased[bias] = true;
    EXPECT_NE(refusal([&] { llama3::parse_hf_config(biased); })
                  .find("config.json: \"" + std::string(bias) +
                        "\" is true; titan's llama3 has no biases, so it "
                        "reads only false"),
              std::string::npos);
  }
  for (const char* key : {"attention_bias", "use_sliding_window"}) {
    json qwen = fixture("qwen3", kV5);
    qwen[key] = true;
    EXPECT_NE(refusal([&] {
                qwen3::parse_hf_config(qwen3::Family::dense, qwen);
              }).find("config.json: \"" + std::string(key) + "\" is true"),
              std::string::npos);
  }
  json not_boolean = fixture("llama", kV5);
  not_boolean["tie_word_embeddings"] = "yes";
  EXPECT_NE(refusal([&] {
              llama3::parse_hf_config(not_boolean);
            }).find("\"tie_word_embeddings\" must be true or false, got \"yes\""),
            std::string::npos);
  json heads = fixture("llama", kV5);
  heads["num_key_value_heads"] = 3;
  EXPECT_NE(refusal([&] { llama3::parse_hf_config(heads); }).find("num_key_value_heads (3)"),
            std::string::npos);
  json type = fixture("qwen3", kV5);
  type["model_type"] = "llama";
  EXPECT_NE(
      refusal([&] { qwen3::parse_hf_config(qwen3::Family::dense, type); }).find("model_type is \"llama\""),
      std::string::npos);
}

TEST(HfConfig, AFlavorThatDiffersIsNamedByTheFilesKeys) {
  llama3::ModelArgs args = llama3::flavor("debugmodel");
  const std::string flavor_theta = json(args.rope_theta).dump();
  args.rope_theta = 10000;
  const models::StateDictAdapter& adapter = models::hf_adapter("llama3");
  EXPECT_TITAN_ERROR(adapter.from_hf_config(llama3::to_hf_config(args, kV5)), "describes no llama3 flavor",
                     "rope_parameters.rope_theta (config.json 10000.0, debugmodel " + flavor_theta + ")");
  EXPECT_TITAN_ERROR(adapter.from_hf_config(llama3::to_hf_config(args, kV4)),
                     "differs in rope_theta (config.json 10000.0, debugmodel " + flavor_theta + ")");
  for (ConfigLayout layout : kLayouts)
    EXPECT_EQ(adapter.from_hf_config(llama3::to_hf_config(llama3::flavor("8B"), layout)).flavor, "8B");
}

// ---- folders: titan convert ---------------------------------------------------------------------

class HfConfigFolder : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { dir = test::fresh_temp_dir(std::string("hf_config_") + GetParam()); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  fs::path dir;
};

INSTANTIATE_TEST_SUITE_P(Models, HfConfigFolder, ::testing::Values("llama3_scaled", "qwen3", "qwen3_moe"),
                         [](const auto& info) { return info.param; });

TEST_P(HfConfigFolder, ConvertOfATransformers5FolderWritesEitherLayout) {
  const std::string model = GetParam();
  // The fixture as transformers 5 saved it, with random weights of its shapes.
  const json config = fixture(model, kV5);
  std::map<std::string, Tensor> weights;
  uint64_t seed = 1;
  for (const auto& [name, shape] : adapter_of(config).hf_shapes(config))
    weights.emplace(name, test::rand_f32(shape, seed++));
  fs::create_directories(dir / "hf");
  std::ofstream(dir / "hf" / "config.json") << config.dump(2);
  checkpoint::write_safetensors((dir / "hf" / "model.safetensors").string(), weights, {{"format", "pt"}});

  train::import_hf_checkpoint(dir / "hf", dir / "titan");
  const json stored = checkpoint::read_metadata(dir / "titan").state["hf_config"];
  EXPECT_EQ(hf::layout_of(stored), kV5);
  train::export_hf_checkpoint(dir / "titan", dir / "v5", kF32);
  train::export_hf_checkpoint(dir / "titan", dir / "v4", kF32, kV4);

  // The 5.x export is the file it came from, but for its dtype.
  json want = config;
  want["dtype"] = "float32";
  EXPECT_EQ(read_json(dir / "v5" / "config.json"), want);
  // The 4.x export holds the 4.x fixture's RoPE and expert keys, and none of 5.x's.
  const json v4 = read_json(dir / "v4" / "config.json"), v4_fixture = fixture(model, kV4);
  for (const std::string& key : layout_keys(kV4)) {
    if (key == hf::kDtypeKey.v4) continue;
    EXPECT_EQ(v4.contains(key), v4_fixture.contains(key)) << key;
    if (v4_fixture.contains(key)) {
      EXPECT_EQ(v4.at(key), v4_fixture.at(key)) << key;
    }
  }
  EXPECT_EQ(v4.value("torch_dtype", json()), "float32");
  for (const std::string& key : layout_keys(kV5)) EXPECT_FALSE(v4.contains(key)) << key;
  EXPECT_EQ(v4.at("bos_token_id"), config.at("bos_token_id")) << "keys titan does not model are kept";

  // Both hold the folder's weights, bit for bit, and read back as the same model.
  for (const char* exported : {"v5", "v4"}) {
    const checkpoint::SafetensorsFile f =
        checkpoint::read_safetensors((dir / exported / "model.safetensors").string());
    EXPECT_EQ(f.tensors.size(), weights.size()) << exported;
    for (const auto& [name, t] : weights)
      EXPECT_TRUE(test::same_bits(f.tensors.at(name), t)) << exported << " " << name;
    EXPECT_EQ(rewritten(model, read_json(dir / exported / "config.json"), kV5), rewritten(model, config, kV5))
        << exported;
  }
}

}  // namespace
}  // namespace titan
