#pragma once
// T5 v1.1's encoder as transformers has it (T5EncoderModel): config.json fields and tensor names.
//
// config.json keys read: model_type ("t5"), d_model, d_kv, d_ff, num_layers, num_heads,
// relative_attention_num_buckets, relative_attention_max_distance, layer_norm_epsilon,
// vocab_size, feed_forward_proj ("gated-gelu" only: T5 v1.1's; the original T5's "relu" and the
// other activations are refused), is_decoder (false only) and dtype / torch_dtype (checked to
// agree). Keys that change nothing in the encoder's output are left alone: dropout_rate (off at
// inference), dense_act_fn and is_gated_act (transformers derives both from feed_forward_proj,
// whatever the file says), the decoder's and the tokenizer's keys (num_decoder_layers,
// pad/eos/decoder_start_token_id, use_cache, is_encoder_decoder), tie_word_embeddings (T5 always
// ties) and the initialiser's.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "titan/models/t5/model_args.h"
#include "titan/nn/module.h"

namespace titan::models::t5 {

// The token embedding's two names: transformers ties encoder.embed_tokens to shared and
// save_pretrained writes shared.weight only; other writers kept either or both.
inline constexpr const char* kSharedEmbedding = "shared.weight";
inline constexpr const char* kEncoderEmbedding = "encoder.embed_tokens.weight";

// Reads config.json with transformers' defaults for absent keys. Throws naming the key when a
// value is missing, of the wrong type, or describes what this encoder cannot compute.
ModelArgs parse_hf_config(const nlohmann::json& config);
// config.json fields for `args` as save_pretrained writes them for T5EncoderModel (no dtype: the
// writer adds it).
nlohmann::json to_hf_config(const ModelArgs& args);

// Every tensor of T5EncoderModel by HF name, the token embedding under each of `embedding_names`.
std::map<std::string, Shape> hf_shapes(const ModelArgs& args,
                                       const std::vector<std::string>& embedding_names = {kSharedEmbedding});
// Our state dict -> HF's names, the embedding as shared.weight (what save_pretrained writes).
nn::StateDict to_hf(const nn::StateDict& ours);
// HF's state dict -> ours. Throws naming a tensor that is not T5EncoderModel's, and when both
// embedding names are given with different values.
nn::StateDict from_hf(const nn::StateDict& hf);

}  // namespace titan::models::t5
