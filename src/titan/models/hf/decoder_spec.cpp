#include "titan/models/hf/decoder_spec.h"

#include <cmath>
#include <functional>
#include <map>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/hf_rope.h"

namespace titan::models::hf {

using json = nlohmann::json;
using common::hf::ConfigFields;

namespace {

// What a family's config class defaults to where the file says nothing.
struct Defaults {
  double rope_theta = 10000;
  bool tie_embeddings = false;
  const char* activation_key = "hidden_act";
  const char* activation = "silu";
  std::optional<int64_t> head_dim = std::nullopt;  // unset: hidden_size / num_attention_heads
  std::optional<double> partial_rotary_factor = std::nullopt;  // unset: every dim rotates
  std::optional<int64_t> original_max_position_embeddings = std::nullopt;
};

// A family: its transformers class, defaults, and what it adds to the common reading.
struct Family {
  const char* architecture;
  Defaults defaults;
  std::function<void(const ConfigFields& f, DecoderSpec& spec)> read;
};

common::Activation activation(const ConfigFields& f, const Defaults& d) {
  const std::string name = f.string(d.activation_key, d.activation);
  if (name == "silu" || name == "swish") return common::Activation::silu;
  if (name == "gelu") return common::Activation::gelu;
  // gelu_new is the same tanh approximation, written out.
  if (name == "gelu_pytorch_tanh" || name == "gelu_new") return common::Activation::gelu_tanh;
  config::require(false, "config.json: \"", d.activation_key, "\" = \"", name,
                  "\" is not an activation titan implements; it has silu, gelu, gelu_pytorch_tanh and gelu_new");
  return common::Activation::silu;
}

// layer_types as transformers 5 writes it; absent: `fallback(i)` says whether layer i slides.
void read_layer_types(const ConfigFields& f, DecoderSpec& spec, const std::function<bool(int64_t)>& fallback,
                      const std::vector<size_t>& rope_of = {0, 0}) {
  const json* types = f.find("layer_types");
  std::vector<bool> sliding;
  if (types) {
    config::require(types->is_array() && static_cast<int64_t>(types->size()) == spec.n_layers,
                    "config.json: \"layer_types\" must list one type for each of the ", spec.n_layers,
                    " layers (num_hidden_layers), got ", types->dump());
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      config::require(t == "full_attention" || t == "sliding_attention", "config.json: \"layer_types\"[", i,
                      "] = ", t.dump(), "; titan reads \"full_attention\" and \"sliding_attention\"");
      sliding.push_back(t == "sliding_attention");
    }
  } else {
    for (int64_t i = 0; i < spec.n_layers; ++i) sliding.push_back(fallback(i));
  }
  int64_t window = 0;
  for (bool s : sliding)
    if (s) window = f.integer("sliding_window");
  config::require(window >= 0, "config.json: \"sliding_window\" must be positive, got ", window);
  spec.layers.clear();
  for (bool s : sliding) spec.layers.push_back({.sliding_window = s ? window : 0, .rope = rope_of[s ? 1 : 0]});
}

// Qwen 2 and 3: layer_types, else the layers from max_window_layers on slide when
// use_sliding_window says so.
void read_qwen_windows(const ConfigFields& f, DecoderSpec& spec) {
  const bool use = f.boolean("use_sliding_window", false);
  const int64_t from = f.find("max_window_layers") ? f.integer("max_window_layers") : spec.n_layers;
  read_layer_types(f, spec, [&](int64_t i) { return use && i >= from; });
}

// Every layer slides by "sliding_window" when the file gives one (Mistral, Mixtral, Phi-3).
void window_everywhere(const ConfigFields& f, DecoderSpec& spec) {
  const int64_t window = f.find("sliding_window") ? f.integer("sliding_window") : 0;
  config::require(window >= 0, "config.json: \"sliding_window\" must be positive or null, got ", window);
  for (LayerSpec& l : spec.layers) l.sliding_window = window;
}

// Gemma 2 and 3's attention: scaled by query_pre_attn_scalar, soft-capped, sandwich norms.
void read_gemma_attention(const ConfigFields& f, DecoderSpec& spec, std::optional<double> attn_cap,
                          std::optional<double> final_cap) {
  spec.residual = Residual::sandwich;
  spec.attention_scale = 1.0 / std::sqrt(f.number("query_pre_attn_scalar", 256));
  // Absent: the config class's default; null: none.
  auto cap = [&](const char* key, std::optional<double> fallback) -> std::optional<double> {
    if (!f.find(key)) return f.has_key(key) ? std::nullopt : fallback;
    const double c = f.number(key);
    config::require(c > 0, "config.json: \"", key, "\" must be positive or null, got ", c);
    return c;
  };
  spec.attention_softcap = cap("attn_logit_softcapping", attn_cap);
  spec.final_softcap = cap("final_logit_softcapping", final_cap);
}

void refuse_true(const ConfigFields& f, const char* key, const char* why) {
  config::require(!f.boolean(key, false), "config.json: \"", key, "\" = true: ", why,
                  "; titan does not implement it");
}

// What every Gemma shares: (1 + w) norms, embeddings scaled by sqrt(hidden), causal attention.
constexpr Defaults kGemmaDefaults{.tie_embeddings = true,
                                  .activation_key = "hidden_activation",
                                  .activation = "gelu_pytorch_tanh",
                                  .head_dim = 256};
void read_gemma(const ConfigFields& f, DecoderSpec& s) {
  s.norm.unit_offset = true;
  s.embedding_scale = std::sqrt(static_cast<double>(s.dim));
  s.qkv_bias = s.out_bias = f.boolean("attention_bias", false);
  refuse_true(f, "use_bidirectional_attention", "attention both ways");
}

const std::map<std::string, Family>& families() {
  static const std::map<std::string, Family> table{
      {"llama",
       {"LlamaForCausalLM", {},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.qkv_bias = s.out_bias = f.boolean("attention_bias", false);
          s.feed_forward.bias = f.boolean("mlp_bias", false);
        }}},
      {"mistral", {"MistralForCausalLM", {}, window_everywhere}},
      {"qwen2",
       {"Qwen2ForCausalLM", {},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.qkv_bias = true;
          read_qwen_windows(f, s);
        }}},
      {"qwen3",
       {"Qwen3ForCausalLM", {.head_dim = 128},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.qkv_bias = s.out_bias = f.boolean("attention_bias", false);
          s.qk_norm = DecoderSpec::QkNorm::per_head;
          read_qwen_windows(f, s);
        }}},
      {"gemma", {"GemmaForCausalLM", kGemmaDefaults, read_gemma}},
      {"gemma2",
       {"Gemma2ForCausalLM", kGemmaDefaults,
        [](const ConfigFields& f, DecoderSpec& s) {
          read_gemma(f, s);
          read_gemma_attention(f, s, 50.0, 30.0);
          read_layer_types(f, s, [](int64_t i) { return (i + 1) % 2 != 0; });
        }}},
      {"gemma3_text",
       {"Gemma3ForCausalLM",
        [] {
          Defaults d = kGemmaDefaults;
          d.rope_theta = 1000000;
          return d;
        }(),
        [](const ConfigFields& f, DecoderSpec& s) {
          read_gemma(f, s);
          s.qk_norm = DecoderSpec::QkNorm::per_head;
          read_gemma_attention(f, s, std::nullopt, std::nullopt);
          const int64_t pattern = f.find("sliding_window_pattern") ? f.integer("sliding_window_pattern")
                                  : f.find("_sliding_window_pattern") ? f.integer("_sliding_window_pattern")
                                                                       : 6;
          read_layer_types(f, s, [pattern](int64_t i) { return (i + 1) % pattern != 0; },
                           {0, s.ropes.size() > 1 ? size_t{1} : size_t{0}});
        }}},
      {"phi3",
       {"Phi3ForCausalLM", {.original_max_position_embeddings = 4096},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.fused_qkv = FusedQkv::stacked;
          s.fused_gate_up = true;
          window_everywhere(f, s);
        }}},
      {"olmo2",
       {"Olmo2ForCausalLM", {},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.residual = Residual::post_norm;
          s.qk_norm = DecoderSpec::QkNorm::full_width;
          s.qkv_bias = s.out_bias = f.boolean("attention_bias", false);
        }}},
      {"granite",
       {"GraniteForCausalLM", {},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.qkv_bias = s.out_bias = f.boolean("attention_bias", false);
          s.feed_forward.bias = f.boolean("mlp_bias", false);
          s.embedding_scale = f.number("embedding_multiplier", 1.0);
          s.attention_scale = f.number("attention_multiplier", 1.0);
          s.residual_scale = f.number("residual_multiplier", 1.0);
          const double logits_scaling = f.number("logits_scaling", 1.0);
          config::require(logits_scaling != 0, "config.json: \"logits_scaling\" must not be 0");
          s.logits_scale = 1.0 / logits_scaling;
        }}},
      {"gpt_neox",
       {"GPTNeoXForCausalLM", {.activation = "gelu", .partial_rotary_factor = 0.25},
        [](const ConfigFields& f, DecoderSpec& s) {
          s.norm = {.kind = common::NormArgs::Kind::layer, .eps = f.number("layer_norm_eps", 1e-5)};
          s.residual = f.boolean("use_parallel_residual", true) ? Residual::parallel : Residual::pre_norm;
          s.qkv_bias = s.out_bias = f.boolean("attention_bias", true);
          s.feed_forward.gated = false;
          s.feed_forward.bias = true;
          s.fused_qkv = FusedQkv::interleaved;
          // NeoX has no grouped-query attention: query_key_value holds every head three times.
          s.n_kv_heads = s.n_heads;
        }}},
      {"mixtral",
       {"MixtralForCausalLM", {.rope_theta = 1000000},
        [](const ConfigFields& f, DecoderSpec& s) {
          window_everywhere(f, s);
          config::require(f.number("router_jitter_noise", 0.0) == 0, "config.json: \"router_jitter_noise\" = ",
                          f.number("router_jitter_noise", 0.0),
                          ": titan's router adds no noise; set it to 0 to train this model");
          s.moe = nn::moe::MoEArgs{.num_experts = f.integer("num_local_experts", 8),
                                   .top_k = f.integer("num_experts_per_tok", 2),
                                   .hidden_dim = s.ffn_dim,
                                   .norm_topk_prob = true};
          s.aux_loss_coeff = f.boolean("output_router_logits", false) ? f.number("router_aux_loss_coef", 0.001) : 0;
        }}},
  };
  return table;
}

// Families that are refused by name, and why.
const std::map<std::string, const char*>& refused() {
  static const std::map<std::string, const char*> table{
      {"deepseek_v3", "multi-head latent attention, shared experts and group-limited routing"},
      {"gpt_oss", "attention sinks and biased experts with a clamped SwiGLU"},
      {"qwen3_moe", "(titan's own qwen3_moe family reads it, for its published flavors)"},
  };
  return table;
}

// Dropout changes what a training step computes; transformers applies it in train mode.
void refuse_dropout(const ConfigFields& f) {
  for (const char* key : {"attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (f.find(key))
      config::require(f.number(key) == 0, "config.json: \"", key, "\" = ", f.number(key),
                      ": titan trains without dropout; set it to 0.0");
}

}  // namespace

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, family] : families()) out.push_back(name);
    return out;
  }();
  return names;
}

DecoderSpec read_config(const json& config) {
  config::require(config.is_object() && config.contains("model_type") && config["model_type"].is_string(),
                  "config.json: no \"model_type\" string; a Hugging Face config.json names its architecture there");
  const std::string type = config["model_type"].get<std::string>();
  auto r = refused().find(type);
  config::require(r == refused().end(), "config.json: model_type \"", type, "\" is not one the hf family reads: ",
                  r == refused().end() ? "" : r->second);
  auto it = families().find(type);
  if (it == families().end()) {
    std::string known;
    for (const std::string& n : supported_model_types()) known += (known.empty() ? "" : ", ") + n;
    config::require(false, "config.json: model_type \"", type, "\" is not one the hf family reads; it reads ",
                    known);
  }
  const Family& family = it->second;
  const ConfigFields f(config, family.architecture);
  DecoderSpec s;
  s.model_type = type;
  s.architecture = family.architecture;
  s.vocab_size = f.integer("vocab_size");
  s.dim = f.integer("hidden_size");
  s.ffn_dim = f.integer("intermediate_size");
  s.n_layers = f.integer("num_hidden_layers");
  s.n_heads = f.integer("num_attention_heads");
  config::require(s.vocab_size > 0 && s.dim > 0 && s.ffn_dim > 0 && s.n_layers > 0 && s.n_heads > 0,
                  "config.json: vocab_size, hidden_size, intermediate_size, num_hidden_layers and "
                  "num_attention_heads must be positive");
  s.n_kv_heads = f.integer("num_key_value_heads", s.n_heads);
  s.head_dim = f.integer("head_dim", family.defaults.head_dim.value_or(s.dim / s.n_heads));
  s.max_position_embeddings = f.integer("max_position_embeddings", 2048);
  s.tie_embeddings = f.boolean("tie_word_embeddings", family.defaults.tie_embeddings);
  s.norm.eps = f.number("rms_norm_eps", 1e-6);
  s.feed_forward.activation = activation(f, family.defaults);
  refuse_dropout(f);

  // RoPE: one for every layer, or (Gemma 3, transformers 5) one per layer type.
  std::optional<double> partial = family.defaults.partial_rotary_factor;
  for (const char* key : {"partial_rotary_factor", "rotary_pct"})
    if (f.find(key)) partial = f.number(key);
  std::optional<int64_t> original = family.defaults.original_max_position_embeddings;
  if (f.find("original_max_position_embeddings")) original = f.integer("original_max_position_embeddings");
  const common::hf::RopeModelFields fields{.architecture = family.architecture,
                                           .head_dim = s.head_dim,
                                           .max_position_embeddings = s.max_position_embeddings,
                                           .partial_rotary_factor = partial,
                                           .original_max_position_embeddings = original};
  std::vector<common::hf::Rope> ropes;
  const json* parameters = f.find("rope_parameters");
  if (parameters && parameters->is_object() && parameters->contains("full_attention")) {
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      config::require(parameters->contains(kind) && (*parameters)[kind].is_object(),
                      "config.json: \"rope_parameters\" holds RoPE per layer type, but no object for \"", kind, "\"");
      const json one{{"rope_parameters", (*parameters)[kind]}};
      ropes.push_back(ConfigFields(one, family.architecture, std::string("rope_parameters.") + kind + ".")
                          .rope(family.defaults.rope_theta));
    }
  } else {
    ropes.push_back(f.rope(family.defaults.rope_theta));
    // GPT-NeoX in transformers 4: the base in its own key.
    if (type == "gpt_neox" && !parameters && f.find("rotary_emb_base")) ropes.back().theta = f.number("rotary_emb_base");
    // Gemma 3 in transformers 4: the local layers' base in its own key, without scaling.
    if (type == "gemma3_text")
      ropes.push_back({.theta = f.number("rope_local_base_freq", 10000),
                       .type = "default",
                       .parameters = json::object(),
                       .where = "rope_local_base_freq",
                       .type_key = "rope_local_base_freq"});
  }
  for (const common::hf::Rope& rope : ropes) s.ropes.push_back(common::hf::rope_spec(rope, fields));
  s.layers.assign(static_cast<size_t>(s.n_layers), LayerSpec{});
  family.read(f, s);

  config::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "config.json: num_attention_heads (",
                  s.n_heads, ") must be a multiple of num_key_value_heads (", s.n_kv_heads, ")");
  config::require(s.head_dim > 0 && s.head_dim % 2 == 0, "config.json: head_dim must be positive and even, got ",
                  s.head_dim);
  config::require(s.max_position_embeddings > 0, "config.json: \"max_position_embeddings\" must be positive, got ",
                  s.max_position_embeddings);
  return s;
}

ModelSummary summarize(const DecoderSpec& s, int64_t seq_len) {
  TITAN_CHECK(seq_len > 0, "hf summarize: seq_len must be positive, got ", seq_len);
  const int64_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
  int64_t attention = s.dim * q_dim + 2 * s.dim * kv_dim + q_dim * s.dim;
  if (s.qkv_bias) attention += q_dim + 2 * kv_dim;
  if (s.out_bias) attention += s.dim;
  if (s.qk_norm == DecoderSpec::QkNorm::per_head) attention += 2 * s.head_dim;
  if (s.qk_norm == DecoderSpec::QkNorm::full_width) attention += q_dim + kv_dim;
  const int64_t mats = s.feed_forward.gated ? 3 : 2;
  int64_t ffn = mats * s.dim * s.ffn_dim + (s.feed_forward.bias ? (mats - 1) * s.ffn_dim + s.dim : 0);
  int64_t ffn_active = ffn;
  if (s.moe) {
    const int64_t expert = 3 * s.dim * s.moe->hidden_dim, router = s.dim * s.moe->num_experts;
    ffn = s.moe->num_experts * expert + router;
    ffn_active = s.moe->top_k * expert + router;
  }
  const int64_t norm = s.norm.kind == common::NormArgs::Kind::layer && s.norm.bias ? 2 * s.dim : s.dim;
  const int64_t norms = norm * (s.residual == Residual::sandwich ? 4 : 2);
  const int64_t embedding = s.vocab_size * s.dim, output = s.tie_embeddings ? 0 : embedding;
  ModelSummary out;
  out.n_layers = s.n_layers;
  out.n_heads = s.n_heads;
  out.n_kv_heads = s.n_kv_heads;
  out.ffn_hidden_dim = s.moe ? 0 : s.ffn_dim;
  out.num_experts = s.moe ? s.moe->num_experts : 0;
  out.vocab_size = s.vocab_size;
  out.num_embedding_params = embedding;
  out.num_params = embedding + s.n_layers * (attention + ffn + norms) + norm + output;
  const int64_t active_matmul = s.n_layers * (attention + ffn_active + norms) + norm + embedding;
  // Attention's scores and values: a sliding layer's queries see at most its window.
  double attended = 0;
  for (const LayerSpec& l : s.layers)
    attended += static_cast<double>(l.sliding_window > 0 ? std::min(l.sliding_window, seq_len) : seq_len);
  out.flops_per_token = 6.0 * static_cast<double>(active_matmul) + 12.0 * static_cast<double>(q_dim) * attended;
  out.description = s.model_type + ": dim " + std::to_string(s.dim) + ", " + std::to_string(s.n_layers) +
                    " layers, " + std::to_string(s.n_heads) + " heads (" + std::to_string(s.n_kv_heads) +
                    " kv), head_dim " + std::to_string(s.head_dim) + ", " +
                    (s.moe ? std::to_string(s.moe->num_experts) + " experts (top " + std::to_string(s.moe->top_k) +
                                 ") of ffn " + std::to_string(s.moe->hidden_dim)
                           : "ffn " + std::to_string(s.ffn_dim)) +
                    ", vocab " + std::to_string(s.vocab_size) + (s.tie_embeddings ? " (tied)" : "") + "; " +
                    fmt_count(static_cast<double>(out.num_params)) + " parameters";
  return out;
}

}  // namespace titan::models::hf
