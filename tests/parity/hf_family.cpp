#include "hf_family.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/paths.h"
#include "titan/checkpoint/hf_checkpoint.h"
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

}  // namespace

const std::vector<std::string>& hf_families() {
  static const std::vector<std::string> families{"llama3", "qwen3", "qwen3_moe"};
  return families;
}

fs::path hf_root(const std::string& family) {
  return fs::path(TITAN_PARITY_DIR) / ("hf_" + family);
}

std::unique_ptr<models::CausalLM> build_hf_model(const std::string& family, const nlohmann::json& config) {
  if (family == "llama3") return std::make_unique<llama3::Transformer>(llama3::parse_hf_config(config).args);
  qwen3::ModelArgs args = qwen3::parse_hf_config(qwen3_family(family), config);
  // Qwen3MoeForCausalLM trains with transformers' pooled load-balancing loss ([moe]
  // load_balance_loss = "global"); the dense family has none.
  args.load_balance_loss = nn::moe::LoadBalanceLoss::global;
  return std::make_unique<qwen3::Transformer>(args);
}

std::unique_ptr<models::CausalLM> import_hf_model(const std::string& family, const fs::path& dir) {
  checkpoint::HfReader reader(dir);
  EXPECT_EQ(train::hf_family(reader).name, family) << dir;
  auto model = build_hf_model(family, reader.config());
  model->load_state_dict(train::load_hf_state(reader, kF32));
  return model;
}

nlohmann::json hf_config_of(const std::string& family, const models::CausalLM& model) {
  if (family == "llama3") return llama3::to_hf_config(dynamic_cast<const llama3::Transformer&>(model).args());
  return qwen3::to_hf_config(dynamic_cast<const qwen3::Transformer&>(model).args());
}

nn::StateDict to_hf(const std::string& family, const models::CausalLM& model, const nn::StateDict& ours) {
  return models::hf_adapter(family).to_hf(ours, hf_config_of(family, model));
}

void export_hf_model(const std::string& family, const models::CausalLM& model, const fs::path& dir,
                     DType dtype) {
  train::save_hf_model(dir, models::hf_adapter(family), hf_config_of(family, model), model.state_dict(),
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
