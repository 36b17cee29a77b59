#pragma once
// FLUX's text encoders to and from Hugging Face folders (config.json with model.safetensors, or
// model.safetensors.index.json over shards), as transformers' save_pretrained writes them: T5 v1.1's
// encoder (T5EncoderModel, FLUX's text_encoder_2) and CLIP's text model (CLIPTextModel, its
// text_encoder). The models compute in float32; autocast (core/autocast.h) runs their products in
// bf16.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "titan/core/dtype.h"
#include "titan/models/clip/model.h"
#include "titan/models/t5/model.h"

namespace titan::train::flux {

// The encoder folder `folder` describes, its weights (either embedding name, or both if equal)
// cast to float32, in eval mode. Errors name the folder and the config key or tensor at fault: a
// tensor missing, unexpected or of another shape (both shapes named); nothing is loaded then.
std::unique_ptr<models::t5::T5Encoder> load_t5_encoder(const std::filesystem::path& folder);
// The same for CLIP: tensors with transformers 4's "text_model." prefix or without it;
// CLIPTextModelWithProjection's text_projection is refused by name.
std::unique_ptr<models::clip::ClipTextModel> load_clip_text(const std::filesystem::path& folder);

// Writes `model` as HF folder `folder`, atomically: config.json in transformers 5's layout (the
// keys of `base_config`, e.g. the config.json it was loaded from, with the model's written over
// them and its dtype key set) and model.safetensors in `dtype` (f32 or bf16), under the names
// transformers 5's save_pretrained writes.
void save_t5_encoder(const std::filesystem::path& folder, const models::t5::T5Encoder& model,
                     DType dtype = kF32, const nlohmann::json& base_config = nlohmann::json::object());
void save_clip_text(const std::filesystem::path& folder, const models::clip::ClipTextModel& model,
                    DType dtype = kF32, const nlohmann::json& base_config = nlohmann::json::object());

}  // namespace titan::train::flux
