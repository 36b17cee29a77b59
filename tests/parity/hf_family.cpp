#include "hf_family.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/paths.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/models/hf/decoder_spec.h"
#include "titan/models/hf/model.h"
#include "titan/models/llama3/model.h"
#include "titan/models/llama3/state_dict_adapter.h"
#include "titan/models/qwen3/model.h"
#include "titan/models/qwen3/state_dict_adapter.h"
#include "titan/models/registry.h"
#include "titan/train/hf_interop.h"

namespace titan::test {

namespace fs = std::filesystem;
namespace llama3 = models::llama3;
namespace qwen3 = models::qwen3;

namespace {

qwen3::Family qwen3_family(const std::string& family) {
  return family == "qwen3_moe" ? qwen3::Family::moe : qwen3::Family::dense;
}

// The hf family's fixtures are named hf_<model_type>.
bool is_hf_decoder(const std::string& family) { return family.starts_with("hf_"); }

// The registry's name of a fixture's family.
std::string registry_name(const std::string& family) { return is_hf_decoder(family) ? "hf" : family; }

// An hf model's config.json: its fixture's (the hf Transformer keeps the spec read from it, not
// the file).
nlohmann::json fixture_config(const std::string& family) {
  return checkpoint::HfReader(hf_root(family) / "single").config();
}

}  // namespace

const std::vector<std::string>& hf_families() {
  static const std::vector<std::string> families{"llama3",   "qwen3",    "qwen3_moe",       "hf_llama",
                                                 "hf_mistral", "hf_qwen2", "hf_qwen3",        "hf_gemma",
                                                 "hf_gemma2",  "hf_gemma3_text", "hf_phi3", "hf_olmo2", "hf_granite",
                                                 "hf_gpt_neox", "hf_mixtral"};
  return families;
}

fs::path hf_root(const std::string& family) {
  return fs::path(TITAN_PARITY_DIR) / ("hf_" + family);
}

std::unique_ptr<models::CausalLM> build_hf_model(const std::string& family, const nlohmann::json& config) {
  if (is_hf_decoder(family)) {
    const models::hf::DecoderSpec spec = models::hf::read_config(config);
    return std::make_unique<models::hf::Transformer>(spec, spec.max_position_embeddings);
  }
  if (family == "llama3") return std::make_unique<llama3::Transformer>(llama3::parse_hf_config(config).args);
  qwen3::ModelArgs args = qwen3::parse_hf_config(qwen3_family(family), config);
  // Qwen3MoeForCausalLM trains with transformers' pooled load-balancing loss ([moe]
  // load_balance_loss = "global"); the dense family has none.
  args.load_balance_loss = nn::moe::LoadBalanceLoss::global;
  return std::make_unique<qwen3::Transformer>(args);
}

std::unique_ptr<models::CausalLM> import_hf_model(const std::string& family, const fs::path& dir) {
  checkpoint::HfReader reader(dir);
  // llama3 and qwen3 read only their flavors' sizes when routing a folder on their own; these
  // fixtures are smaller, so the family is named, as a job's model.name names it.
  EXPECT_EQ(train::hf_family(reader, registry_name(family)).name, registry_name(family)) << dir;
  auto model = build_hf_model(family, reader.config());
  model->load_state_dict(train::load_hf_state(reader, kF32, registry_name(family)));
  return model;
}

nlohmann::json hf_config_of(const std::string& family, const models::CausalLM& model) {
  if (is_hf_decoder(family)) return fixture_config(family);
  if (family == "llama3") return llama3::to_hf_config(dynamic_cast<const llama3::Transformer&>(model).args());
  return qwen3::to_hf_config(dynamic_cast<const qwen3::Transformer&>(model).args());
}

nn::StateDict to_hf(const std::string& family, const models::CausalLM& model, const nn::StateDict& ours) {
  return models::hf_adapter(registry_name(family)).to_hf(ours, hf_config_of(family, model));
}

void export_hf_model(const std::string& family, const models::CausalLM& model, const fs::path& dir,
                     DType dtype) {
  train::save_hf_model(dir, models::hf_adapter(registry_name(family)), hf_config_of(family, model), model.state_dict(),
                       dtype);
}

void hf_logits(const std::string& family, const std::vector<std::pair<fs::path, fs::path>>& folder_to_file) {
  std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + TITAN_SOURCE_DIR +
                    "/tests/parity/hf_reference.py' logits --family " + family;
  for (const auto& [folder, file] : folder_to_file)
    cmd += " --model '" + folder.string() + "' --out '" + file.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace titan::test
