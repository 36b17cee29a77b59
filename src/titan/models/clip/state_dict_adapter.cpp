#include "titan/models/clip/state_dict_adapter.h"

#include <string_view>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/common/hf_names.h"

namespace titan::models::clip {

namespace {

using json = nlohmann::json;
namespace hf = common::hf;

constexpr const char* kArchitecture = "CLIPTextModel";

constexpr hf::Rename kBlock[] = {
    {"attention_norm.weight", "layer_norm1.weight"},
    {"attention_norm.bias", "layer_norm1.bias"},
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wq.bias", "self_attn.q_proj.bias"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wk.bias", "self_attn.k_proj.bias"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wv.bias", "self_attn.v_proj.bias"},
    {"attention.wo.weight", "self_attn.out_proj.weight"},
    {"attention.wo.bias", "self_attn.out_proj.bias"},
    {"ffn_norm.weight", "layer_norm2.weight"},
    {"ffn_norm.bias", "layer_norm2.bias"},
    {"feed_forward.w1.weight", "mlp.fc1.weight"},
    {"feed_forward.w1.bias", "mlp.fc1.bias"},
    {"feed_forward.w2.weight", "mlp.fc2.weight"},
    {"feed_forward.w2.bias", "mlp.fc2.bias"},
};
constexpr hf::Rename kTop[] = {
    {"tok_embeddings.weight", "embeddings.token_embedding.weight"},
    {"pos_embeddings.weight", "embeddings.position_embedding.weight"},
    {"norm.weight", "final_layer_norm.weight"},
    {"norm.bias", "final_layer_norm.bias"},
};
constexpr hf::NameTable kNames{"encoder.layers.", kBlock, kTop};

common::Activation parse_activation(const std::string& name) {
  if (name == "quick_gelu") return common::Activation::quick_gelu;
  config::require(name == "gelu", "config.json: \"hidden_act\" is \"", name,
                  "\"; titan's CLIP text model computes \"quick_gelu\" (OpenAI's CLIP) or \"gelu\"");
  return common::Activation::gelu;
}

}  // namespace

ModelArgs parse_hf_config(const json& j) {
  const hf::ConfigFields f(j, kArchitecture);
  const std::string type = f.string("model_type", "");
  config::require(
      type == "clip_text_model", "config.json: model_type is \"", type,
      "\"; titan's CLIP text model reads \"clip_text_model\" (CLIPTextModel) folders, not a whole "
      "CLIPModel's");
  f.renamed(hf::kDtypeKey, false);
  ModelArgs a;
  a.vocab_size = f.integer("vocab_size", 49408);
  a.dim = f.integer("hidden_size", 512);
  a.ffn_dim = f.integer("intermediate_size", 2048);
  a.n_layers = f.integer("num_hidden_layers", 12);
  a.n_heads = f.integer("num_attention_heads", 8);
  a.max_positions = f.integer("max_position_embeddings", 77);
  a.norm_eps = f.number("layer_norm_eps", 1e-5);
  a.activation = parse_activation(f.string("hidden_act", "quick_gelu"));
  a.eos_token_id = f.integer("eos_token_id", 49407);
  // Names the keys of sizes that cannot make a model.
  a.validate();
  return a;
}

json to_hf_config(const ModelArgs& a) {
  a.validate();
  return {{"architectures", {kArchitecture}},
          {"model_type", "clip_text_model"},
          {"vocab_size", a.vocab_size},
          {"hidden_size", a.dim},
          {"intermediate_size", a.ffn_dim},
          {"num_hidden_layers", a.n_layers},
          {"num_attention_heads", a.n_heads},
          {"max_position_embeddings", a.max_positions},
          {"layer_norm_eps", a.norm_eps},
          {"hidden_act", a.activation == common::Activation::quick_gelu ? "quick_gelu" : "gelu"},
          {"eos_token_id", a.eos_token_id}};
}

std::map<std::string, Shape> hf_shapes(const ModelArgs& a, const std::string& prefix) {
  std::map<std::string, Shape> out{
      {prefix + "embeddings.token_embedding.weight", {a.vocab_size, a.dim}},
      {prefix + "embeddings.position_embedding.weight", {a.max_positions, a.dim}},
      {prefix + "final_layer_norm.weight", {a.dim}},
      {prefix + "final_layer_norm.bias", {a.dim}}};
  for (int64_t i = 0; i < a.n_layers; ++i) {
    const std::string block = prefix + std::string(kNames.hf_block) + std::to_string(i) + ".";
    for (const char* norm : {"layer_norm1.", "layer_norm2."})
      for (const char* p : {"weight", "bias"}) out[block + norm + p] = {a.dim};
    for (const char* proj : {"q_proj.", "k_proj.", "v_proj.", "out_proj."}) {
      out[block + "self_attn." + proj + "weight"] = {a.dim, a.dim};
      out[block + "self_attn." + proj + "bias"] = {a.dim};
    }
    out[block + "mlp.fc1.weight"] = {a.ffn_dim, a.dim};
    out[block + "mlp.fc1.bias"] = {a.ffn_dim};
    out[block + "mlp.fc2.weight"] = {a.dim, a.ffn_dim};
    out[block + "mlp.fc2.bias"] = {a.dim};
  }
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours) {
  nn::StateDict out;
  for (const auto& [name, t] : ours) {
    const std::optional<std::string> hf_name = hf::rename(name, true, kNames);
    TITAN_CHECK(hf_name, "clip to_hf: tensor '", name,
                "' has no Hugging Face name; it is not a CLIP text model parameter");
    out[*hf_name] = t;
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf_state) {
  nn::StateDict out;
  for (const auto& [name, t] : hf_state) {
    TITAN_CHECK(name != kTextProjection, "clip from_hf: tensor '", name,
                "' is CLIPTextModelWithProjection's projection of the pooled output, which CLIPTextModel and "
                "FLUX (conditioned on pooler_output) do not use; load a CLIPTextModel folder");
    std::string_view bare = name;
    if (bare.starts_with(kLegacyPrefix)) bare.remove_prefix(std::string_view(kLegacyPrefix).size());
    const std::optional<std::string> ours = hf::rename(std::string(bare), false, kNames);
    TITAN_CHECK(ours, "clip from_hf: tensor '", name, "' is not one of ", kArchitecture, "'s");
    out[*ours] = t;
  }
  return out;
}

}  // namespace titan::models::clip
