#include "titan/models/llama3/state_dict_adapter.h"

#include <vector>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/common/hf_names.h"

namespace titan::models::llama3 {

namespace {

using json = nlohmann::json;
namespace hf = common::hf;

constexpr const char* kArchitecture = "LlamaForCausalLM";

const std::vector<hf::Rename>& block_renames() {
  static const std::vector<hf::Rename> table = hf::join({hf::kAttention, hf::kFeedForward, hf::kBlockNorms});
  return table;
}

// The heads whose rows move with RoPE's layout in our tensor `ours`: n_heads for wq, n_kv_heads
// for wk; 0 for every other tensor.
int64_t rope_heads(const std::string& ours, const ModelArgs& args) {
  const auto b = hf::split_block(ours, hf::kOursBlock);
  if (!b) return 0;
  if (b->rest == "attention.wq.weight") return args.n_heads;
  if (b->rest == "attention.wk.weight") return args.n_kv_heads;
  return 0;
}

// Rows [n_heads, a, b, in] -> [n_heads, b, a, in]: interleaved (pair i at rows 2i, 2i + 1, so
// a = head_dim / 2, b = 2) to half (pair i at rows i, i + head_dim / 2), or back.
Tensor swap_row_groups(const Tensor& weight, int64_t n_heads, bool to_half, const char* what) {
  TITAN_CHECK(weight.dim() == 2 && n_heads > 0 && weight.size(0) % (2 * n_heads) == 0, what,
              ": expected a projection weight [n_heads * head_dim, in] with n_heads = ", n_heads,
              " and an even head_dim, got ", weight.desc());
  const int64_t half = weight.size(0) / n_heads / 2, in = weight.size(1);
  const Shape from = to_half ? Shape{n_heads, half, 2, in} : Shape{n_heads, 2, half, in};
  return weight.detach().contiguous().view(from).transpose(1, 2).contiguous().view({n_heads * 2 * half, in});
}

ops::RopeScaling parse_rope_scaling(const hf::Rope& rope) {
  const hf::ConfigFields f(rope.parameters, kArchitecture, rope.where + ".");
  ops::RopeScaling s;
  s.factor = f.number("factor");
  s.low_freq_factor = f.number("low_freq_factor");
  s.high_freq_factor = f.number("high_freq_factor");
  s.original_max_position = f.integer("original_max_position_embeddings");
  config::require(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                      s.original_max_position > 0,
                  "config.json: \"", rope.where,
                  "\" of rope_type \"llama3\" needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                  "original_max_position_embeddings > 0, got ",
                  rope.parameters.dump());
  return s;
}

}  // namespace

Tensor interleaved_to_half(const Tensor& weight, int64_t n_heads) {
  return swap_row_groups(weight, n_heads, true, "llama3 interleaved_to_half");
}

Tensor half_to_interleaved(const Tensor& weight, int64_t n_heads) {
  return swap_row_groups(weight, n_heads, false, "llama3 half_to_interleaved");
}

json to_hf_config(const ModelArgs& a, ConfigLayout layout) {
  a.validate();
  json c = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", a.dim},
            {"intermediate_size", a.ffn_hidden_dim()},
            {"num_hidden_layers", a.n_layers},
            {"num_attention_heads", a.n_heads},
            {"num_key_value_heads", a.n_kv_heads},
            {"head_dim", a.head_dim()},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"rms_norm_eps", a.norm_eps},
            {"vocab_size", a.vocab_size},
            {"max_position_embeddings", a.max_seq_len},
            {"tie_word_embeddings", false}};
  json scaling = json::object();
  if (a.use_scaled_rope)
    scaling = {{"factor", a.rope_scaling.factor},
               {"low_freq_factor", a.rope_scaling.low_freq_factor},
               {"high_freq_factor", a.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", a.rope_scaling.original_max_position}};
  hf::put_rope(c, layout, a.rope_theta, a.use_scaled_rope ? "llama3" : "default", scaling);
  return c;
}

HfConfig parse_hf_config(const json& j) {
  const hf::ConfigFields f(j, kArchitecture);
  const std::string type = f.string("model_type", "");
  config::require(type == "llama", "config.json: model_type is \"", type,
                  "\"; titan's llama3 reads \"llama\" (LlamaForCausalLM) checkpoints");
  HfConfig c;
  ModelArgs& a = c.args;
  a.dim = f.integer("hidden_size");
  a.n_layers = f.integer("num_hidden_layers");
  a.n_heads = f.integer("num_attention_heads");
  a.n_kv_heads = f.integer("num_key_value_heads", a.n_heads);
  a.ffn_dim = f.integer("intermediate_size");
  a.vocab_size = f.integer("vocab_size");
  a.max_seq_len = f.integer("max_position_embeddings", 2048);
  a.norm_eps = f.number("rms_norm_eps", 1e-6);
  const hf::Rope rope = f.rope(10000.0);
  a.rope_theta = rope.theta;
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.layout = hf::layout_of(j);
  // Unused (the weights say their dtype), but a file giving two is contradicting itself.
  f.renamed(hf::kDtypeKey, false);
  config::require(a.dim > 0 && a.n_heads > 0 && a.dim % a.n_heads == 0, "config.json: num_attention_heads (",
                  a.n_heads, ") must divide hidden_size (", a.dim, ")");
  config::require(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "config.json: num_key_value_heads (",
                  a.n_kv_heads, ") must divide num_attention_heads (", a.n_heads, ")");
  const int64_t head_dim = f.integer("head_dim", a.dim / a.n_heads);
  config::require(head_dim == a.dim / a.n_heads, "config.json: head_dim ", head_dim,
                  " differs from hidden_size / num_attention_heads = ", a.dim / a.n_heads,
                  "; titan's llama3 derives head_dim from those two");
  config::require(head_dim % 2 == 0, "config.json: head_dim ", head_dim,
                  " must be even (RoPE rotates pairs)");
  const std::string act = f.string("hidden_act", "silu");
  config::require(act == "silu", "config.json: hidden_act \"", act,
                  "\"; titan's llama3 computes SwiGLU (\"silu\")");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    config::require(!f.boolean(bias, false), "config.json: \"", bias,
                    "\" is true; titan's llama3 has no biases, so it reads only false (or no such key)");
  config::require(rope.type == "llama3" || rope.type == "default", "config.json: \"", rope.type_key,
                  "\" is \"", rope.type,
                  "\"; titan's llama3 implements Llama 3.1's \"llama3\" RoPE scaling, or none (\"default\")");
  a.use_scaled_rope = rope.type == "llama3";
  if (a.use_scaled_rope) a.rope_scaling = parse_rope_scaling(rope);
  config::require(
      a.n_layers > 0 && a.ffn_dim > 0 && a.vocab_size > 0 && a.max_seq_len > 0 && a.rope_theta > 0 &&
          a.norm_eps >= 0,
      "config.json: num_hidden_layers, intermediate_size, vocab_size, max_position_embeddings and "
      "rope_theta must be positive and rms_norm_eps not negative, got ",
      a.n_layers, ", ", a.ffn_dim, ", ", a.vocab_size, ", ", a.max_seq_len, ", ", a.rope_theta, " and ",
      a.norm_eps);
  a.validate();
  return c;
}

json imported_hf_config(const json& config, ConfigLayout layout) {
  return hf::merged_config(config, to_hf_config(parse_hf_config(config).args, layout), layout);
}

std::map<std::string, Shape> hf_shapes(const HfConfig& c) {
  const ModelArgs& a = c.args;
  std::map<std::string, Shape> out = hf::decoder_shapes({.dim = a.dim,
                                                         .n_layers = a.n_layers,
                                                         .n_heads = a.n_heads,
                                                         .n_kv_heads = a.n_kv_heads,
                                                         .head_dim = a.head_dim(),
                                                         .vocab_size = a.vocab_size,
                                                         .tie_embeddings = c.tie_word_embeddings});
  for (int64_t i = 0; i < a.n_layers; ++i)
    hf::add_swiglu_shapes(out, hf::hf_block_name(i, "mlp."), a.dim, a.ffn_hidden_dim());
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours, const ModelArgs& args) {
  nn::StateDict out;
  for (const auto& [name, t] : ours) {
    const std::optional<std::string> hf_name = hf::rename(name, true, block_renames());
    TITAN_CHECK(hf_name, "llama3 to_hf: tensor '", name,
                "' has no Hugging Face name; it is not a llama3 parameter");
    const int64_t heads = rope_heads(name, args);
    out[*hf_name] = heads ? interleaved_to_half(t, heads) : t;
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf_state, const HfConfig& config) {
  nn::StateDict out;
  for (const auto& [name, t] : hf_state) {
    const std::optional<std::string> ours = hf::rename(name, false, block_renames());
    TITAN_CHECK(ours, "llama3 from_hf: tensor '", name, "' is not one of LlamaForCausalLM's");
    const int64_t heads = rope_heads(*ours, config.args);
    out[*ours] = heads ? half_to_interleaved(t, heads) : t;
  }
  // Ours is untied: the output projection starts as a copy of the embedding and trains apart.
  if (config.tie_word_embeddings && !out.count("output.weight") && out.count("tok_embeddings.weight"))
    out["output.weight"] = out["tok_embeddings.weight"].detach().clone();
  return out;
}

ModelConfig matching_flavor(const HfConfig& config) {
  ModelConfig m;
  m.name = "llama3";
  // The vocabulary may differ (model.vocab_size overrides it); max_position_embeddings only
  // sizes tables.
  m.flavor =
      hf::matching_flavor("llama3", to_hf_config(config.args, config.layout), flavor_names(),
                          [&](const std::string& name) { return to_hf_config(flavor(name), config.layout); },
                          {"vocab_size", "max_position_embeddings"});
  m.vocab_size = config.args.vocab_size;
  return m;
}

}  // namespace titan::models::llama3
