#pragma once
// The hf family's tensors under the names and layouts of each model_type's transformers class.
// titan's names are the Llama family's (tok_embeddings, layers.<i>.attention.wq, ...); where a
// checkpoint fuses projections (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's per-head
// query_key_value) the adapter splits them on import and joins them on export, so round trips
// are exact and every plan sees separate q, k and v.
#include <map>
#include <string>

#include "titan/models/hf/decoder_spec.h"
#include "titan/nn/module.h"

namespace titan::models::hf {

// Every tensor of the HF model (HF names and shapes).
std::map<std::string, Shape> hf_shapes(const DecoderSpec& spec);
// Our state dict -> HF's names and layouts, and back. Throws naming a tensor that is missing or
// of the wrong shape.
nn::StateDict to_hf(const nn::StateDict& ours, const DecoderSpec& spec);
nn::StateDict from_hf(const nn::StateDict& hf, const DecoderSpec& spec);

}  // namespace titan::models::hf
