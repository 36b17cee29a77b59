#pragma once
// A Hugging Face decoder as data: everything in its config.json that changes the math, read by
// model_type into one description that the hf family's model code follows (hf/model.h). Llama,
// Mistral, Qwen 2 and 3, Gemma 1-3, Phi-3, OLMo 2, Granite, GPT-NeoX and Mixtral are values of
// it; a key whose value titan does not implement is refused by name when it is read.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "titan/models/common/feed_forward.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/common/norm_args.h"
#include "titan/models/model_summary.h"
#include "titan/nn/moe/moe.h"
#include "titan/ops/rope_frequencies.h"

namespace titan::models::hf {

// How a block joins its sublayers to the residual stream.
enum class Residual {
  pre_norm,  // h = x + attn(n1(x)); out = h + ffn(n2(h))                      (Llama)
  sandwich,  // h = x + n1'(attn(n1(x))); out = h + n2'(ffn(n2(h)))           (Gemma 2, 3)
  post_norm, // h = x + n1'(attn(x)); out = h + n2'(ffn(h))                    (OLMo 2)
  parallel,  // out = x + attn(n1(x)) + ffn(n2(x))                             (GPT-NeoX)
};

// How the checkpoint stores q, k, v and gate, up: titan keeps them apart (so tensor parallelism
// splits them alike in every family); the adapter splits and joins what the file fuses.
enum class FusedQkv {
  none,
  stacked,      // Phi-3's qkv_proj: [all q rows; all k rows; all v rows]
  interleaved,  // GPT-NeoX's query_key_value: per head [q; k; v]
};

struct LayerSpec {
  int64_t sliding_window = 0;  // Hugging Face's: the query and the window - 1 keys before it; 0: none
  size_t rope = 0;             // its RoPE, an index into DecoderSpec::ropes
};

struct DecoderSpec {
  std::string model_type;     // config.json's
  std::string architecture;   // e.g. "MistralForCausalLM": how errors name it
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t max_position_embeddings = 0;
  bool tie_embeddings = false;

  common::NormArgs norm;  // every norm of the model
  Residual residual = Residual::pre_norm;
  common::FeedForwardArgs feed_forward;
  bool qkv_bias = false, out_bias = false;
  // QK-norm: none, per head (Qwen 3, Gemma 3) or over the whole width (OLMo 2).
  enum class QkNorm { none, per_head, full_width } qk_norm = QkNorm::none;
  std::optional<double> attention_scale;  // unset: 1 / sqrt(head_dim)
  std::optional<double> attention_softcap, final_softcap;
  double embedding_scale = 1.0, residual_scale = 1.0, logits_scale = 1.0;

  // Its table is built for the model's max_seq_len (dynamic and longrope scaling as transformers
  // scales a forward of that length).
  std::vector<ops::RopeSpec> ropes;
  std::vector<LayerSpec> layers;  // n_layers of them

  // Set: every block's feed-forward is a mixture of experts (Mixtral's softmax -> top-k ->
  // renormalised routing), with the load-balancing loss's coefficient (0 unless the file asks
  // for router logits).
  std::optional<nn::moe::MoEArgs> moe;
  double aux_loss_coeff = 0;

  // How the checkpoint names and stores the tensors.
  FusedQkv fused_qkv = FusedQkv::none;
  bool fused_gate_up = false;  // Phi-3's gate_up_proj: [gate rows; up rows]

  // Layers of one kind (same window, same RoPE) run as one graph-mode loop.
  bool same_kind(size_t a, size_t b) const {
    return layers[a].sliding_window == layers[b].sliding_window && layers[a].rope == layers[b].rope;
  }
};

// The model_types read, and those refused by name with why.
const std::vector<std::string>& supported_model_types();

// Reads config.json (transformers 4 or 5 layout) as transformers would, with its defaults for
// absent keys. Throws naming the key and value when the model cannot be built as the file says
// (an unsupported model_type, activation, RoPE type, or a key titan does not implement).
DecoderSpec read_config(const nlohmann::json& config);

// Parameter count and training FLOPs per token at seq_len.
ModelSummary summarize(const DecoderSpec& spec, int64_t seq_len);

}  // namespace titan::models::hf
