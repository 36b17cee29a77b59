#include "titan/models/t5/state_dict_adapter.h"

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/common/hf_names.h"

namespace titan::models::t5 {

namespace {

using json = nlohmann::json;
namespace hf = common::hf;

constexpr const char* kArchitecture = "T5EncoderModel";
constexpr const char* kRelativeBias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";

constexpr hf::Rename kBlock[] = {
    {"attention_norm.weight", "layer.0.layer_norm.weight"},
    {"attention.wq.weight", "layer.0.SelfAttention.q.weight"},
    {"attention.wk.weight", "layer.0.SelfAttention.k.weight"},
    {"attention.wv.weight", "layer.0.SelfAttention.v.weight"},
    {"attention.wo.weight", "layer.0.SelfAttention.o.weight"},
    {"ffn_norm.weight", "layer.1.layer_norm.weight"},
    {"feed_forward.w1.weight", "layer.1.DenseReluDense.wi_0.weight"},
    {"feed_forward.w3.weight", "layer.1.DenseReluDense.wi_1.weight"},
    {"feed_forward.w2.weight", "layer.1.DenseReluDense.wo.weight"},
};
constexpr hf::Rename kTop[] = {
    {"tok_embeddings.weight", kSharedEmbedding},
    {"tok_embeddings.weight", kEncoderEmbedding},
    {"relative_attention_bias.weight", kRelativeBias},
    {"norm.weight", "encoder.final_layer_norm.weight"},
};
constexpr hf::NameTable kNames{"encoder.block.", kBlock, kTop};

std::string hf_block_name(int64_t layer, std::string_view rest) {
  return std::string(kNames.hf_block) + std::to_string(layer) + "." + std::string(rest);
}

}  // namespace

ModelArgs parse_hf_config(const json& j) {
  const hf::ConfigFields f(j, kArchitecture);
  const std::string type = f.string("model_type", "");
  config::require(type == "t5", "config.json: model_type is \"", type,
                  "\"; titan's T5 encoder reads \"t5\" (T5EncoderModel) folders");
  config::require(!f.boolean("is_decoder", false),
                  "config.json: \"is_decoder\" is true; titan's T5 is the encoder (T5EncoderModel), whose "
                  "attention sees both ways");
  const std::string ff = f.string("feed_forward_proj", "relu");
  config::require(
      ff == "gated-gelu", "config.json: \"feed_forward_proj\" is \"", ff,
      "\"; titan's T5 encoder computes T5 v1.1's \"gated-gelu\" (gelu_new(wi_0 x) * wi_1 x) only");
  f.renamed(hf::kDtypeKey, false);
  ModelArgs a;
  a.vocab_size = f.integer("vocab_size", 32128);
  a.d_model = f.integer("d_model", 512);
  a.d_kv = f.integer("d_kv", 64);
  a.d_ff = f.integer("d_ff", 2048);
  a.n_layers = f.integer("num_layers", 6);
  a.n_heads = f.integer("num_heads", 8);
  a.num_buckets = f.integer("relative_attention_num_buckets", 32);
  a.max_distance = f.integer("relative_attention_max_distance", 128);
  a.norm_eps = f.number("layer_norm_epsilon", 1e-6);
  // Names the keys of sizes that cannot make a model.
  a.validate();
  return a;
}

json to_hf_config(const ModelArgs& a) {
  a.validate();
  return {{"architectures", {kArchitecture}},
          {"model_type", "t5"},
          {"vocab_size", a.vocab_size},
          {"d_model", a.d_model},
          {"d_kv", a.d_kv},
          {"d_ff", a.d_ff},
          {"num_layers", a.n_layers},
          {"num_heads", a.n_heads},
          {"relative_attention_num_buckets", a.num_buckets},
          {"relative_attention_max_distance", a.max_distance},
          {"layer_norm_epsilon", a.norm_eps},
          {"feed_forward_proj", "gated-gelu"},
          {"dense_act_fn", "gelu_new"},
          {"is_gated_act", true},
          {"is_decoder", false},
          {"is_encoder_decoder", false},
          {"tie_word_embeddings", true}};
}

std::map<std::string, Shape> hf_shapes(const ModelArgs& a, const std::vector<std::string>& embedding_names) {
  std::map<std::string, Shape> out{{kRelativeBias, {a.num_buckets, a.n_heads}},
                                   {"encoder.final_layer_norm.weight", {a.d_model}}};
  for (const std::string& name : embedding_names) {
    TITAN_CHECK(name == kSharedEmbedding || name == kEncoderEmbedding, "t5 hf_shapes: '", name,
                "' is not a name of the token embedding; those are ", kSharedEmbedding, " and ",
                kEncoderEmbedding);
    out[name] = {a.vocab_size, a.d_model};
  }
  const int64_t inner = a.inner_dim();
  for (int64_t i = 0; i < a.n_layers; ++i) {
    for (const char* norm : {"layer.0.layer_norm.weight", "layer.1.layer_norm.weight"})
      out[hf_block_name(i, norm)] = {a.d_model};
    for (const char* p : {"q", "k", "v"})
      out[hf_block_name(i, std::string("layer.0.SelfAttention.") + p + ".weight")] = {inner, a.d_model};
    out[hf_block_name(i, "layer.0.SelfAttention.o.weight")] = {a.d_model, inner};
    out[hf_block_name(i, "layer.1.DenseReluDense.wi_0.weight")] = {a.d_ff, a.d_model};
    out[hf_block_name(i, "layer.1.DenseReluDense.wi_1.weight")] = {a.d_ff, a.d_model};
    out[hf_block_name(i, "layer.1.DenseReluDense.wo.weight")] = {a.d_model, a.d_ff};
  }
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours) {
  nn::StateDict out;
  for (const auto& [name, t] : ours) {
    // The first of the embedding's two HF names in kTop, shared.weight, is the one written.
    const std::optional<std::string> hf_name = hf::rename(name, true, kNames);
    TITAN_CHECK(hf_name, "t5 to_hf: tensor '", name,
                "' has no Hugging Face name; it is not a T5 encoder parameter");
    out[*hf_name] = t;
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf_state) {
  nn::StateDict out;
  for (const auto& [name, t] : hf_state) {
    const std::optional<std::string> ours = hf::rename(name, false, kNames);
    TITAN_CHECK(ours, "t5 from_hf: tensor '", name, "' is not one of ", kArchitecture, "'s");
    out[*ours] = t;
  }
  if (hf_state.count(kSharedEmbedding) && hf_state.count(kEncoderEmbedding)) {
    const Tensor& a = hf_state.at(kSharedEmbedding);
    const Tensor& b = hf_state.at(kEncoderEmbedding);
    const bool same = a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
                      a.contiguous().to_vector<float>() == b.contiguous().to_vector<float>();
    TITAN_CHECK(same, "t5 from_hf: ", kSharedEmbedding, " ", a.desc(), " and ", kEncoderEmbedding, " ",
                b.desc(), " differ; T5 ties them, so a checkpoint holding both must hold one table twice");
    out["tok_embeddings.weight"] = a;
  }
  return out;
}

}  // namespace titan::models::t5
