#pragma once
// The model families titan exchanges with Hugging Face transformers (llama3, qwen3, qwen3_moe), as
// the HF parity tests meet them: through the folders tests/parity/hf_reference.py writes, and
// titan's generic model (CausalLM) and state dict adapter, so that one test serves all three.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/models/causal_lm.h"
#include "titan/nn/module.h"

namespace titan::test {

// The families, by titan's model.name.
const std::vector<std::string>& hf_families();

// hf_reference.py's folder for `family` (build/parity/hf_<family>).
std::filesystem::path hf_root(const std::string& family);

// The model config.json describes (read by the family's adapter), its weights not yet set.
std::unique_ptr<models::CausalLM> build_hf_model(const std::string& family, const nlohmann::json& config);

// The model of HF folder `dir` with its weights in float32, read as titan convert and
// checkpoint.initial_load_path read them; the folder must be of `family`.
std::unique_ptr<models::CausalLM> import_hf_model(const std::string& family, const std::filesystem::path& dir);

// config.json as titan's export writes it for `model` (one of build_hf_model's).
nlohmann::json hf_config_of(const std::string& family, const models::CausalLM& model);

// Our state dict (or gradients by parameter name) of `model` under HF's names and layouts.
nn::StateDict to_hf(const std::string& family, const models::CausalLM& model, const nn::StateDict& ours);

// Writes `model` as HF folder `dir` in `dtype`, as titan convert --to hf does.
void export_hf_model(const std::string& family, const models::CausalLM& model, const std::filesystem::path& dir,
                     DType dtype);

// Runs hf_reference.py's logits command once: HF's from_pretrained of each folder, computing in
// float32, writes its logits on the reference tokens to the file paired with it.
void hf_logits(const std::string& family,
               const std::vector<std::pair<std::filesystem::path, std::filesystem::path>>& folder_to_file);

}  // namespace titan::test
