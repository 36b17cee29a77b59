#pragma once
// Hugging Face model folders, as transformers' save_pretrained writes them and from_pretrained
// reads them:
//   config.json                       the architecture's hyperparameters
//   model.safetensors                 every tensor, by HF's names; or, for large models,
//   model.safetensors.index.json      {"weight_map": {tensor: file}} over
//   model-00001-of-0000N.safetensors  shard files
// This layer moves tensors and JSON only; which names and config keys a model has is its
// family's state dict adapter's business (models/<family>/state_dict_adapter).
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "titan/checkpoint/checkpoint.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

class SafetensorsReader;

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
// diffusers' models keep the same layout under another name (its index: this + ".index.json").
inline constexpr const char* kDiffusersWeightsFile = "diffusion_pytorch_model.safetensors";

// Whether `dir` is a Hugging Face model folder: one holding config.json (a titan checkpoint
// holds metadata.json instead).
bool is_hf_dir(const std::filesystem::path& dir);

// "float32" / "bfloat16": config.json's dtype (torch_dtype before transformers 5) for f32 / bf16.
std::string torch_dtype_name(DType dtype);

// Writes `config` as dir/config.json (as given: which key names the dtype depends on its
// layout, the caller's business) and `tensors`, cast to `dtype`, as dir/model.safetensors
// (metadata {"format": "pt"}, which from_pretrained checks), or as dir/`weights_file` (diffusers'
// folders: kDiffusersWeightsFile).
// Atomic as checkpoint::save: a staging folder, fsync'ed, renamed onto `dir`, so a crash leaves
// the old folder or the new one, never a mix; `also_write` as in checkpoint::save.
void save_hf(const std::filesystem::path& dir, const nlohmann::json& config,
             const std::map<std::string, Tensor>& tensors, DType dtype, const AlsoWrite& also_write = {},
             const std::string& weights_file = kHfWeightsFile);

// A Hugging Face model folder opened for reading: config.json parsed, and model.safetensors,
// else the shard files of model.safetensors.index.json, mapped (headers checked, data read on
// demand). Errors name the folder and the file at fault. `weights_file` replaces model.safetensors
// (and its index, weights_file + ".index.json") for diffusers' folders.
class HfReader {
 public:
  explicit HfReader(std::filesystem::path dir, const std::string& weights_file = kHfWeightsFile);
  ~HfReader();
  HfReader(const HfReader&) = delete;
  HfReader& operator=(const HfReader&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  std::filesystem::path config_path() const { return dir_ / kHfConfigFile; }
  bool holds(const std::string& tensor) const { return tensors_.count(tensor) > 0; }

  // The tensors named in `expected`, after checking that the folder holds exactly those, of
  // those shapes and of floating dtypes; every problem is reported in one error, naming the
  // tensor and its file. Each is cast to `dtype`, or kept as stored when nullopt.
  std::map<std::string, Tensor> load(const std::map<std::string, Shape>& expected,
                                     std::optional<DType> dtype = std::nullopt) const;

 private:
  std::filesystem::path dir_;
  nlohmann::json config_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;  // by file name
  std::map<std::string, const SafetensorsReader*> tensors_;          // tensor -> its file
};

}  // namespace titan::checkpoint
