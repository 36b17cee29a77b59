#pragma once
// The autoencoder's two on-disk forms:
//   diffusers' AutoencoderKL folder: config.json and its tensors by diffusers' names, which are
//     titan's own (model.h builds diffusers' module tree), so its state dict maps as it is;
//   BFL's ae.safetensors (black-forest-labs/flux, src/flux/modules/autoencoder.py): no config,
//     other names (encoder.down.N.block.M.nin_shortcut, encoder.mid.attn_1.q, ...), decoder
//     levels numbered the other way (BFL's up.N is diffusers' up_blocks.(levels - 1 - N)), and the
//     attention's q, k, v and proj_out as 1x1 convolutions [C, C, 1, 1] where diffusers has
//     Linear [C, C]; the elements are the same, so the conversion only reshapes.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/models/autoencoder/model_args.h"
#include "titan/nn/module.h"

namespace titan::models::autoencoder {

// Reads diffusers' AutoencoderKL config.json (`where` names it in errors), with diffusers'
// defaults for absent keys. Throws naming the key for what this model cannot compute: another
// _class_name, block types other than DownEncoderBlock2D / UpDecoderBlock2D, an activation other
// than silu, latents_mean / latents_std, block type lists whose length differs from
// block_out_channels', or a key AutoencoderKL does not have. sample_size and force_upcast (tiling
// and pipeline dtype hints, no part of the math) are accepted.
ModelArgs parse_diffusers_config(const nlohmann::json& config, const std::string& where);
// The config.json from_pretrained builds `args` from (no _diffusers_version: titan is not diffusers).
nlohmann::json to_diffusers_config(const ModelArgs& args);

// Every tensor by titan's (= diffusers') names, and by BFL's.
std::map<std::string, Shape> shapes(const ModelArgs& args);
std::map<std::string, Shape> bfl_shapes(const ModelArgs& args);

// Our state dict -> BFL's names and shapes. Throws for quant convolutions, which BFL's model has
// no place for.
nn::StateDict to_bfl(const nn::StateDict& ours, const ModelArgs& args);
// BFL's state dict -> ours. Throws naming a tensor that is not one of bfl_shapes(args), of another
// shape (both shapes named), or missing.
nn::StateDict from_bfl(const nn::StateDict& bfl, const ModelArgs& args);

}  // namespace titan::models::autoencoder
