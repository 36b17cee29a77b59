#pragma once
// Llama 3 as Hugging Face transformers has it (LlamaForCausalLM): config.json fields and
// parameter names, and the per-head row order of q_proj/k_proj that its RoPE layout needs.
//
// Meta's (and our) RoPE rotates dims (2i, 2i + 1) of a head together; HF's rotates (i, i + d/2),
// both by the angle of frequency i. Moving row 2i of a head's wq to row i and row 2i + 1 to row
// i + d/2 (same for wk) makes HF's q and k the same numbers as ours, each pair moved to where
// HF's rotation expects it. Attention then sees the same scores: q·k sums over a head's dims,
// and q and k are permuted alike. wv, wo and everything else keep their layout.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/models/common/hf_config.h"
#include "titan/models/llama3/model_args.h"
#include "titan/models/registry.h"
#include "titan/nn/module.h"

namespace titan::models::llama3 {

using common::hf::ConfigLayout;

// A config.json as this adapter reads it: the model's args, whether the file ties lm_head to
// embed_tokens (Llama 3.2 1B and 3B do), and its layout (which names errors use). Our model keeps
// a separate output projection, so a tied checkpoint is imported with output.weight a copy of the
// embedding.
struct HfConfig {
  ModelArgs args;
  bool tie_word_embeddings = false;
  ConfigLayout layout = ConfigLayout::transformers5;
};

// config.json fields for `args` in `layout` (model_type "llama", architectures LlamaForCausalLM,
// untied embeddings; max_position_embeddings is args.max_seq_len). No dtype: the writer adds it.
nlohmann::json to_hf_config(const ModelArgs& args, ConfigLayout layout = ConfigLayout::transformers5);
// `config` (either layout) as the model an import of it gives has it, in `layout`: its own keys
// (bos_token_id, ...) kept, ours written over them (so tie_word_embeddings is false), the other
// layout's keys gone.
nlohmann::json imported_hf_config(const nlohmann::json& config, ConfigLayout layout);
// Reads config.json, in either layout, as transformers does, with its defaults for absent keys.
// Throws naming the key when a value is missing, of the wrong type, given differently by the two
// layouts, or describes what this model cannot compute (another activation, biases, head_dim !=
// hidden_size / num_attention_heads, a RoPE scaling other than Llama 3.1's).
HfConfig parse_hf_config(const nlohmann::json& config);

// Every tensor of the HF model (HF names and shapes).
std::map<std::string, Shape> hf_shapes(const HfConfig& config);
// Our state dict -> HF's names, with wq and wk rows in HF's order.
nn::StateDict to_hf(const nn::StateDict& ours, const ModelArgs& args);
// HF's state dict -> ours. Throws naming a tensor that is not one of hf_shapes(config).
nn::StateDict from_hf(const nn::StateDict& hf, const HfConfig& config);

// The row permutation of one projection's weight [n_heads * head_dim, in] (see above), and its
// inverse.
Tensor interleaved_to_half(const Tensor& weight, int64_t n_heads);
Tensor half_to_interleaved(const Tensor& weight, int64_t n_heads);

// The flavor whose model `config` describes, with vocab_size set to the file's (which may
// override the flavor's). Throws, naming the closest flavor and the keys (as config.layout names
// them) that differ from it, when none matches.
ModelConfig matching_flavor(const HfConfig& config);

}  // namespace titan::models::llama3
