#pragma once
// The FLUX transformer's two on-disk forms. Titan's names are BFL's (model.h), so BFL's
// flux1-*.safetensors loads as it is, after a check of names and shapes. diffusers'
// FluxTransformer2DModel folder differs:
//   - fused tensors are split: a double block's img_attn.qkv is attn.to_q / to_k / to_v (txt_attn's
//     attn.add_{q,k,v}_proj), a single block's linear1 is attn.to_q / to_k / to_v and proj_mlp;
//   - final_layer.adaLN_modulation.1 is norm_out.linear with its two halves swapped (BFL's shift,
//     scale; diffusers' scale, shift);
//   - Q/K norm `scale`s are `weight`s, the rest renamed one to one.
// Conversions copy rows, so round trips are bit-exact.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/models/flux/model_args.h"
#include "titan/nn/module.h"

namespace titan::models::flux {

// Reads diffusers' FluxTransformer2DModel config.json (`where` names it in errors), with diffusers'
// defaults for absent keys. diffusers has no packing patch or latent channel count (they live in
// the pipeline): `patch_size` is the pipeline's packing (2 for FLUX.1), and latent_channels =
// in_channels / patch_size^2. Throws naming the key for another _class_name, a diffusers
// patch_size other than 1 (it widens proj_out, which no FLUX checkpoint does), out_channels other
// than in_channels, an unknown key, or sizes that make no model.
FluxModelArgs parse_diffusers_config(const nlohmann::json& config, const std::string& where,
                                     int64_t patch_size = 2);
// The config.json from_pretrained builds `args` from.
nlohmann::json to_diffusers_config(const FluxModelArgs& args);

// Every tensor by titan's (= BFL's) names, and by diffusers'.
std::map<std::string, Shape> shapes(const FluxModelArgs& args);
std::map<std::string, Shape> diffusers_shapes(const FluxModelArgs& args);

// Our state dict -> diffusers' names and shapes, and back. Both refuse, in one error naming each
// tensor, what is missing, unexpected or of another shape (both shapes named).
nn::StateDict to_diffusers(const nn::StateDict& ours, const FluxModelArgs& args);
nn::StateDict from_diffusers(const nn::StateDict& diffusers, const FluxModelArgs& args);
// BFL's names are ours: the same check, then the tensors as they are.
nn::StateDict from_bfl(const nn::StateDict& bfl, const FluxModelArgs& args);

}  // namespace titan::models::flux
