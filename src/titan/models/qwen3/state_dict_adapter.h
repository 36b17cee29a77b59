#pragma once
// Qwen 3 as Hugging Face transformers has it: Qwen3ForCausalLM (model_type "qwen3") and
// Qwen3MoeForCausalLM ("qwen3_moe"), their config.json fields and parameter names.
//
// Both rotate q and k in halves (dims i and i + head_dim / 2 together), as ours does, so q_proj
// and k_proj keep their rows. What differs is the experts of an MoE block: HF keeps each expert's
// projections as separate tensors (mlp.experts.<e>.gate_proj.weight [hidden, dim], ...), ours
// stacks them (moe.experts.w1 [experts, hidden, dim]); expert e's slice of the stack is HF's
// tensor as it is, [out, in], so export slices and import stacks, moving no element within one.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/models/common/hf_config.h"
#include "titan/models/qwen3/model_args.h"
#include "titan/models/registry.h"
#include "titan/nn/module.h"

namespace titan::models::qwen3 {

using common::hf::ConfigLayout;

// config.json fields for `args` in `layout`: Qwen3ForCausalLM's, or Qwen3MoeForCausalLM's when
// args.moe is set (an MoE block in every layer: decoder_sparse_step 1, no mlp_only_layers; the
// job's aux_loss_coeff as router_aux_loss_coef). max_position_embeddings is args.max_seq_len. No
// dtype: the writer adds it. Throws for the expert bias (moe.load_balance_bias), which HF's
// router has no place for.
nlohmann::json to_hf_config(const ModelArgs& args, ConfigLayout layout = ConfigLayout::transformers5);
// Reads config.json of `family`, in either layout, as transformers does, with its defaults for
// absent keys (the sizes have none here). Throws naming the key when a value is missing, of the
// wrong type, given differently by the two layouts, or describes what this model cannot compute:
// another model_type, activation, biases, sliding windows, RoPE scaling, heads that do not
// group, or (MoE) dense layers among the sparse ones.
ModelArgs parse_hf_config(Family family, const nlohmann::json& config);
// `config` (either layout) as the model an import of it gives has it, in `layout`: its own keys
// kept, ours written over them, the other layout's keys gone.
nlohmann::json imported_hf_config(Family family, const nlohmann::json& config, ConfigLayout layout);

// Every tensor of the HF model (HF names and shapes).
std::map<std::string, Shape> hf_shapes(const ModelArgs& args);
// Our state dict -> HF's names, experts sliced out of their stacks. Throws for the expert bias,
// as to_hf_config does.
nn::StateDict to_hf(const nn::StateDict& ours, const ModelArgs& args);
// HF's state dict -> ours, experts stacked. Throws naming a tensor that is not one of
// hf_shapes(args), or an expert that is missing.
nn::StateDict from_hf(const nn::StateDict& hf, const ModelArgs& args);

// The [model] keys of the model `args` describes: its flavor, with the file's vocab_size,
// tie_word_embeddings (model.weight_tying) and router_aux_loss_coef ([moe] aux_loss_coeff), which
// a job may choose. Throws, naming the closest flavor and the keys (as `layout` names them, the
// file's) that differ from it, when none matches.
ModelConfig matching_flavor(Family family, const ModelArgs& args,
                            ConfigLayout layout = ConfigLayout::transformers5);

}  // namespace titan::models::qwen3
