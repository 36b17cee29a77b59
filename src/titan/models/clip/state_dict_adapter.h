#pragma once
// CLIP's text encoder as transformers has it (CLIPTextModel): config.json fields and tensor names.
//
// config.json keys read: model_type ("clip_text_model"), hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, max_position_embeddings, hidden_act ("quick_gelu" or
// "gelu"; others refused), layer_norm_eps, vocab_size, eos_token_id (one id; it picks the pooled
// position) and dtype / torch_dtype (checked to agree). Keys that change nothing in
// CLIPTextModel's outputs are left alone: bos_token_id and pad_token_id (the tokenizer's),
// projection_dim (CLIPTextModelWithProjection's), attention_dropout and dropout (off at
// inference), initializer_range and initializer_factor.
//
// Tensor names: transformers 5 writes CLIPTextModel's without a prefix ("embeddings.",
// "encoder.layers.<i>.", "final_layer_norm."); transformers 4, and the folders it wrote (FLUX's
// text_encoder), under "text_model.". Both are read; export writes transformers 5's, which
// transformers 5 loads.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/models/clip/model_args.h"
#include "titan/nn/module.h"

namespace titan::models::clip {

// transformers 4's prefix of every CLIPTextModel tensor.
inline constexpr const char* kLegacyPrefix = "text_model.";
// CLIPTextModelWithProjection's projection of the pooled output, which CLIPTextModel (and FLUX,
// which conditions on pooler_output) does not have.
inline constexpr const char* kTextProjection = "text_projection.weight";

// Reads config.json with transformers' defaults for absent keys. Throws naming the key when a
// value is missing, of the wrong type, or describes what this model cannot compute.
ModelArgs parse_hf_config(const nlohmann::json& config);
// config.json fields for `args` as save_pretrained writes them for CLIPTextModel (no dtype: the
// writer adds it).
nlohmann::json to_hf_config(const ModelArgs& args);

// Every tensor of CLIPTextModel by HF name, each after `prefix` ("" or kLegacyPrefix).
std::map<std::string, Shape> hf_shapes(const ModelArgs& args, const std::string& prefix = "");
// Our state dict -> HF's names (transformers 5's, without a prefix).
nn::StateDict to_hf(const nn::StateDict& ours);
// HF's state dict, names with or without kLegacyPrefix -> ours. Throws naming a tensor that is
// not CLIPTextModel's (text_projection.weight with the reason).
nn::StateDict from_hf(const nn::StateDict& hf);

}  // namespace titan::models::clip
