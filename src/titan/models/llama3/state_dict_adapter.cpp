#include "titan/models/llama3/state_dict_adapter.h"

#include <optional>
#include <vector>

#include "titan/core/error.h"

namespace titan::models::llama3 {

namespace {

using json = nlohmann::json;

// Which projection's rows move with RoPE's layout: q has n_heads heads, k n_kv_heads.
enum class Rope { none, q, k };

struct Rename {
  const char* ours;
  const char* hf;
  Rope rope;
};

// Per block, after "layers.<i>." (ours) and "model.layers.<i>." (HF).
constexpr Rename kBlock[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight", Rope::q},
    {"attention.wk.weight", "self_attn.k_proj.weight", Rope::k},
    {"attention.wv.weight", "self_attn.v_proj.weight", Rope::none},
    {"attention.wo.weight", "self_attn.o_proj.weight", Rope::none},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight", Rope::none},
    {"feed_forward.w2.weight", "mlp.down_proj.weight", Rope::none},
    {"feed_forward.w3.weight", "mlp.up_proj.weight", Rope::none},
    {"attention_norm.weight", "input_layernorm.weight", Rope::none},
    {"ffn_norm.weight", "post_attention_layernorm.weight", Rope::none},
};
constexpr Rename kTop[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight", Rope::none},
    {"norm.weight", "model.norm.weight", Rope::none},
    {"output.weight", "lm_head.weight", Rope::none},
};
constexpr const char* kOursBlock = "layers.";
constexpr const char* kHfBlock = "model.layers.";

// "<prefix><i>.<rest>" -> (i, rest); false for names of another form.
bool split_block(const std::string& name, const std::string& prefix, std::string& index, std::string& rest) {
  if (!name.starts_with(prefix)) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  index = name.substr(prefix.size(), dot - prefix.size());
  rest = name.substr(dot + 1);
  return index.find_first_not_of("0123456789") == std::string::npos;
}

// The rename of `name` (ours when `from_ours`, else HF's) and the name it becomes; null when
// the name is none of llama3's.
const Rename* find_rename(const std::string& name, bool from_ours, std::string& renamed) {
  std::string index, rest;
  if (split_block(name, from_ours ? kOursBlock : kHfBlock, index, rest)) {
    for (const Rename& r : kBlock) {
      if (rest != (from_ours ? r.ours : r.hf)) continue;
      renamed = (from_ours ? kHfBlock : kOursBlock) + index + "." + (from_ours ? r.hf : r.ours);
      return &r;
    }
    return nullptr;
  }
  for (const Rename& r : kTop) {
    if (name != (from_ours ? r.ours : r.hf)) continue;
    renamed = from_ours ? r.hf : r.ours;
    return &r;
  }
  return nullptr;
}

int64_t heads_of(Rope rope, const ModelArgs& args) {
  return rope == Rope::q ? args.n_heads : args.n_kv_heads;
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

// ---- reading config.json ----------------------------------------------------------------------

// Values of config.json by key, with transformers' defaults for absent keys; errors name the key.
class ConfigFields {
 public:
  explicit ConfigFields(const json& j) : j_(j) {
    TITAN_CHECK(j.is_object(), "config.json: expected a JSON object, got ", j.type_name());
  }
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    TITAN_CHECK(v || fallback, "config.json: \"", key, "\" is missing; LlamaForCausalLM needs it");
    if (!v) return *fallback;
    TITAN_CHECK(v->is_number_integer(), "config.json: \"", key, "\" must be an integer, got ", v->dump());
    return v->get<int64_t>();
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    const json* v = find(key);
    TITAN_CHECK(v || fallback, "config.json: \"", key, "\" is missing; LlamaForCausalLM needs it");
    if (!v) return *fallback;
    TITAN_CHECK(v->is_number(), "config.json: \"", key, "\" must be a number, got ", v->dump());
    return v->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    TITAN_CHECK(v->is_boolean(), "config.json: \"", key, "\" must be true or false, got ", v->dump());
    return v->get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    TITAN_CHECK(v->is_string(), "config.json: \"", key, "\" must be a string, got ", v->dump());
    return v->get<std::string>();
  }

 private:
  const json& j_;
};

ops::RopeScaling parse_rope_scaling(const json& j) {
  const ConfigFields f(j);
  ops::RopeScaling s;
  s.factor = f.number("factor");
  s.low_freq_factor = f.number("low_freq_factor");
  s.high_freq_factor = f.number("high_freq_factor");
  s.original_max_position = f.integer("original_max_position_embeddings");
  TITAN_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                  s.original_max_position > 0,
              "config.json: \"rope_scaling\" of rope_type \"llama3\" needs factor > 0, 0 < low_freq_factor < "
              "high_freq_factor and original_max_position_embeddings > 0, got ",
              j.dump());
  return s;
}

// "key (config.json X, <flavor> Y)" for each key of config.json that a flavor's config.json
// (as to_hf_config writes both) has otherwise. The vocabulary may differ (model.vocab_size
// overrides it); max_position_embeddings only sizes tables.
std::vector<std::string> differences(const json& file, const json& flavor, const std::string& flavor_name) {
  std::vector<std::string> out;
  for (const auto& [key, value] : flavor.items()) {
    if (key == "vocab_size" || key == "max_position_embeddings") continue;
    const json theirs = file.value(key, json());
    if (theirs != value)
      out.push_back(key + " (config.json " + theirs.dump() + ", " + flavor_name + " " + value.dump() + ")");
  }
  return out;
}

}  // namespace

Tensor interleaved_to_half(const Tensor& weight, int64_t n_heads) {
  return swap_row_groups(weight, n_heads, true, "llama3 interleaved_to_half");
}

Tensor half_to_interleaved(const Tensor& weight, int64_t n_heads) {
  return swap_row_groups(weight, n_heads, false, "llama3 half_to_interleaved");
}

json to_hf_config(const ModelArgs& a) {
  a.validate();
  json rope_scaling = nullptr;
  if (a.use_scaled_rope)
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", a.rope_scaling.factor},
                    {"low_freq_factor", a.rope_scaling.low_freq_factor},
                    {"high_freq_factor", a.rope_scaling.high_freq_factor},
                    {"original_max_position_embeddings", a.rope_scaling.original_max_position}};
  return {{"architectures", {"LlamaForCausalLM"}},
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
          {"rope_theta", a.rope_theta},
          {"rope_scaling", std::move(rope_scaling)},
          {"vocab_size", a.vocab_size},
          {"max_position_embeddings", a.max_seq_len},
          {"tie_word_embeddings", false}};
}

HfConfig parse_hf_config(const json& j) {
  const ConfigFields f(j);
  const std::string type = f.string("model_type", "");
  TITAN_CHECK(type == "llama", "config.json: model_type is \"", type,
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
  a.rope_theta = f.number("rope_theta", 10000.0);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  TITAN_CHECK(a.dim > 0 && a.n_heads > 0 && a.dim % a.n_heads == 0, "config.json: num_attention_heads (",
              a.n_heads, ") must divide hidden_size (", a.dim, ")");
  TITAN_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "config.json: num_key_value_heads (",
              a.n_kv_heads, ") must divide num_attention_heads (", a.n_heads, ")");
  const int64_t head_dim = f.integer("head_dim", a.dim / a.n_heads);
  TITAN_CHECK(head_dim == a.dim / a.n_heads, "config.json: head_dim ", head_dim,
              " differs from hidden_size / num_attention_heads = ", a.dim / a.n_heads,
              "; titan's llama3 derives head_dim from those two");
  TITAN_CHECK(head_dim % 2 == 0, "config.json: head_dim ", head_dim, " must be even (RoPE rotates pairs)");
  const std::string act = f.string("hidden_act", "silu");
  TITAN_CHECK(act == "silu", "config.json: hidden_act \"", act,
              "\"; titan's llama3 computes SwiGLU (\"silu\")");
  TITAN_CHECK(!f.boolean("attention_bias", false) && !f.boolean("mlp_bias", false),
              "config.json: attention_bias and mlp_bias must be false; titan's llama3 has no biases");
  a.use_scaled_rope = false;
  if (const json* rs = f.find("rope_scaling")) {
    const ConfigFields r(*rs);
    // Older configs name it "type".
    const std::string kind = r.string("rope_type", r.string("type", "default"));
    TITAN_CHECK(kind == "llama3" || kind == "default", "config.json: rope_scaling of type \"", kind,
                "\"; titan's llama3 implements Llama 3.1's \"llama3\" scaling (or none)");
    if (kind == "llama3") {
      a.use_scaled_rope = true;
      a.rope_scaling = parse_rope_scaling(*rs);
    }
  }
  TITAN_CHECK(a.n_layers > 0 && a.ffn_dim > 0 && a.vocab_size > 0 && a.max_seq_len > 0 && a.rope_theta > 0 &&
                  a.norm_eps >= 0,
              "config.json: num_hidden_layers, intermediate_size, vocab_size, max_position_embeddings and "
              "rope_theta must be positive and rms_norm_eps not negative, got ",
              a.n_layers, ", ", a.ffn_dim, ", ", a.vocab_size, ", ", a.max_seq_len, ", ", a.rope_theta,
              " and ", a.norm_eps);
  a.validate();
  return c;
}

json imported_hf_config(const json& config) {
  json out = config;
  out.update(to_hf_config(parse_hf_config(config).args));
  return out;
}

std::map<std::string, Shape> hf_shapes(const HfConfig& c) {
  const ModelArgs& a = c.args;
  const int64_t q = a.n_heads * a.head_dim(), kv = a.n_kv_heads * a.head_dim(), ffn = a.ffn_hidden_dim();
  std::map<std::string, Shape> out{{"model.embed_tokens.weight", {a.vocab_size, a.dim}},
                                   {"model.norm.weight", {a.dim}}};
  if (!c.tie_word_embeddings) out["lm_head.weight"] = {a.vocab_size, a.dim};
  for (int64_t i = 0; i < a.n_layers; ++i) {
    const std::string p = kHfBlock + std::to_string(i) + ".";
    out[p + "self_attn.q_proj.weight"] = {q, a.dim};
    out[p + "self_attn.k_proj.weight"] = {kv, a.dim};
    out[p + "self_attn.v_proj.weight"] = {kv, a.dim};
    out[p + "self_attn.o_proj.weight"] = {a.dim, q};
    out[p + "mlp.gate_proj.weight"] = {ffn, a.dim};
    out[p + "mlp.up_proj.weight"] = {ffn, a.dim};
    out[p + "mlp.down_proj.weight"] = {a.dim, ffn};
    out[p + "input_layernorm.weight"] = {a.dim};
    out[p + "post_attention_layernorm.weight"] = {a.dim};
  }
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours, const ModelArgs& args) {
  nn::StateDict out;
  for (const auto& [name, t] : ours) {
    std::string hf;
    const Rename* r = find_rename(name, true, hf);
    TITAN_CHECK(r, "llama3 to_hf: tensor '", name,
                "' has no Hugging Face name; it is not a llama3 parameter");
    out[hf] = r->rope == Rope::none ? t : interleaved_to_half(t, heads_of(r->rope, args));
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf, const HfConfig& config) {
  nn::StateDict out;
  for (const auto& [name, t] : hf) {
    std::string ours;
    const Rename* r = find_rename(name, false, ours);
    TITAN_CHECK(r, "llama3 from_hf: tensor '", name, "' is not one of LlamaForCausalLM's");
    out[ours] = r->rope == Rope::none ? t : half_to_interleaved(t, heads_of(r->rope, config.args));
  }
  // Ours is untied: the output projection starts as a copy of the embedding and trains apart.
  if (config.tie_word_embeddings && !out.count("output.weight") && out.count("tok_embeddings.weight"))
    out["output.weight"] = out["tok_embeddings.weight"].detach().clone();
  return out;
}

ModelConfig matching_flavor(const HfConfig& config) {
  const json file = to_hf_config(config.args);
  std::string closest;
  std::vector<std::string> closest_diff;
  for (const std::string& name : flavor_names()) {
    std::vector<std::string> diff = differences(file, to_hf_config(flavor(name)), name);
    if (diff.empty()) {
      ModelConfig m;
      m.name = "llama3";
      m.flavor = name;
      m.vocab_size = config.args.vocab_size;
      return m;
    }
    if (closest.empty() || diff.size() < closest_diff.size()) {
      closest = name;
      closest_diff = std::move(diff);
    }
  }
  std::string listed;
  for (const std::string& d : closest_diff) listed += (listed.empty() ? "" : ", ") + d;
  std::string names;
  for (const std::string& n : flavor_names()) names += (names.empty() ? "" : ", ") + n;
  TITAN_CHECK(false, "config.json describes no llama3 flavor (", names, "); the closest, ", closest,
              ", differs in ", listed);
  return {};
}

}  // namespace titan::models::llama3
