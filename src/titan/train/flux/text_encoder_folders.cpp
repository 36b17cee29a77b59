#include "titan/train/flux/text_encoder_folders.h"

#include <string>
#include <vector>

#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/core/config_schema.h"
#include "titan/models/clip/state_dict_adapter.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/t5/state_dict_adapter.h"
#include "titan/train/hf_interop.h"

namespace titan::train::flux {

namespace fs = std::filesystem;
using json = nlohmann::json;
namespace hf = models::common::hf;
namespace t5 = models::t5;
namespace clip = models::clip;

namespace {

// save_hf_model's checks and writing need only the names and the shapes.
models::StateDictAdapter writer(std::function<std::map<std::string, Shape>(const json&)> shapes,
                                std::function<nn::StateDict(const nn::StateDict&)> to_hf) {
  models::StateDictAdapter adapter;
  adapter.hf_shapes = std::move(shapes);
  adapter.to_hf = [to_hf = std::move(to_hf)](const nn::StateDict& ours, const json&) { return to_hf(ours); };
  return adapter;
}

json written_config(const json& base, const json& ours) {
  config::require(base.is_object(), "text encoder export: the base config must be a JSON object, got ",
                  base.type_name());
  return hf::merged_config(base, ours, hf::ConfigLayout::transformers5);
}

}  // namespace

std::unique_ptr<t5::T5Encoder> load_t5_encoder(const fs::path& folder) {
  const checkpoint::HfReader reader(folder);
  const t5::ModelArgs args = t5::parse_hf_config(reader.config());
  std::vector<std::string> embedding_names;
  for (const char* name : {t5::kSharedEmbedding, t5::kEncoderEmbedding})
    if (reader.holds(name)) embedding_names.push_back(name);
  // With neither, the error names the one save_pretrained writes as missing.
  if (embedding_names.empty()) embedding_names.push_back(t5::kSharedEmbedding);
  auto model = std::make_unique<t5::T5Encoder>(args);
  model->load_state_dict(t5::from_hf(reader.load(t5::hf_shapes(args, embedding_names), kF32)));
  model->eval();
  return model;
}

std::unique_ptr<clip::ClipTextModel> load_clip_text(const fs::path& folder) {
  const checkpoint::HfReader reader(folder);
  const clip::ModelArgs args = clip::parse_hf_config(reader.config());
  TITAN_CHECK(!reader.holds(clip::kTextProjection), "Hugging Face folder ", folder.string(), " holds ",
              clip::kTextProjection,
              ": it is a CLIPTextModelWithProjection, whose projected text_embeds FLUX does not use; titan "
              "loads CLIPTextModel folders (FLUX's text_encoder)");
  const std::string prefix =
      reader.holds(std::string(clip::kLegacyPrefix) + "final_layer_norm.weight") ? clip::kLegacyPrefix : "";
  auto model = std::make_unique<clip::ClipTextModel>(args);
  model->load_state_dict(clip::from_hf(reader.load(clip::hf_shapes(args, prefix), kF32)));
  model->eval();
  return model;
}

void save_t5_encoder(const fs::path& folder, const t5::T5Encoder& model, DType dtype,
                     const json& base_config) {
  const json config = written_config(base_config, t5::to_hf_config(model.args()));
  const t5::ModelArgs args = model.args();
  save_hf_model(folder, writer([args](const json&) { return t5::hf_shapes(args); }, t5::to_hf), config,
                model.state_dict(), dtype);
}

void save_clip_text(const fs::path& folder, const clip::ClipTextModel& model, DType dtype,
                    const json& base_config) {
  const json config = written_config(base_config, clip::to_hf_config(model.args()));
  const clip::ModelArgs args = model.args();
  save_hf_model(folder, writer([args](const json&) { return clip::hf_shapes(args); }, clip::to_hf), config,
                model.state_dict(), dtype);
}

}  // namespace titan::train::flux
