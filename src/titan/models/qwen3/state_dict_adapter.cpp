#include "titan/models/qwen3/state_dict_adapter.h"

#include <optional>
#include <vector>

#include "titan/core/config_schema.h"
#include "titan/core/error.h"
#include "titan/models/common/hf_config.h"
#include "titan/models/common/hf_names.h"

namespace titan::models::qwen3 {

namespace {

using json = nlohmann::json;
namespace hf = common::hf;

const char* architecture(Family family) {
  return family == Family::dense ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM";
}

Family family_of(const ModelArgs& args) {
  return args.moe ? Family::moe : Family::dense;
}

constexpr hf::Rename kRouter[] = {{"moe.router.gate.weight", "mlp.gate.weight"}};
// Our stacked projections, after "layers.<i>.moe.experts.", and each expert's in HF, after
// "model.layers.<i>.mlp.experts.<e>.".
constexpr hf::Rename kExpertProjections[] = {
    {"w1", "gate_proj.weight"},
    {"w2", "down_proj.weight"},
    {"w3", "up_proj.weight"},
};
constexpr std::string_view kOursExperts = "moe.experts.";
constexpr std::string_view kHfExperts = "mlp.experts.";

// The block tensors that only change names (experts aside).
std::span<const hf::Rename> block_renames(const ModelArgs& args) {
  static const std::vector<hf::Rename> dense =
      hf::join({hf::kAttention, hf::kQkNorm, hf::kBlockNorms, hf::kFeedForward});
  static const std::vector<hf::Rename> moe =
      hf::join({hf::kAttention, hf::kQkNorm, hf::kBlockNorms, kRouter});
  return args.moe ? moe : dense;
}

const hf::Rename* expert_projection(std::string_view name, bool ours) {
  for (const hf::Rename& r : kExpertProjections)
    if (name == (ours ? r.ours : r.hf)) return &r;
  return nullptr;
}

// One expert's projection as HF names it: "model.layers.<layer>.mlp.experts.<expert>.<proj>".
struct HfExpert {
  int64_t layer = 0;
  int64_t expert = 0;
  const hf::Rename* projection = nullptr;
};

std::optional<HfExpert> parse_hf_expert(const std::string& name) {
  const auto block = hf::split_block(name, hf::kHfBlock);
  if (!block) return std::nullopt;
  const auto expert = hf::split_block(block->rest, kHfExperts);
  if (!expert) return std::nullopt;
  const hf::Rename* projection = expert_projection(expert->rest, false);
  if (!projection) return std::nullopt;
  return HfExpert{block->index, expert->index, projection};
}

std::string hf_expert_name(int64_t layer, int64_t expert, const hf::Rename& projection) {
  return hf::hf_block_name(
      layer, std::string(kHfExperts) + std::to_string(expert) + "." + std::string(projection.hf));
}

// Expert tensors of one (layer, projection) of an HF state dict -> ours, [experts, out, in].
Tensor stack_experts(const std::map<int64_t, Tensor>& by_expert, int64_t layer, const hf::Rename& projection,
                     int64_t num_experts) {
  for (int64_t e = 0; e < num_experts; ++e)
    TITAN_CHECK(by_expert.count(e), "qwen3_moe from_hf: tensor '", hf_expert_name(layer, e, projection),
                "' is missing; config.json says each MoE layer has ", num_experts, " experts");
  TITAN_CHECK(static_cast<int64_t>(by_expert.size()) == num_experts, "qwen3_moe from_hf: tensor '",
              hf_expert_name(layer, by_expert.rbegin()->first, projection),
              "' is not one of Qwen3MoeForCausalLM's; config.json says each MoE layer has ", num_experts,
              " experts");
  const Tensor& first = by_expert.at(0);
  Tensor stacked = Tensor::empty({num_experts, first.size(0), first.size(1)}, {.dtype = first.dtype()});
  for (const auto& [e, t] : by_expert) {
    TITAN_CHECK(t.sizes() == first.sizes(), "qwen3_moe from_hf: tensor '",
                hf_expert_name(layer, e, projection), "' is ", t.desc(), " but expert 0's is ", first.desc(),
                "; every expert has the same shape");
    stacked.narrow(0, e, 1).copy_(t.detach().unsqueeze(0));
  }
  return stacked;
}

}  // namespace

json to_hf_config(const ModelArgs& a, ConfigLayout layout) {
  a.validate();
  const Family family = family_of(a);
  // Checked here, where every export starts, rather than after training.
  TITAN_CHECK(
      !a.moe || !a.moe->load_balance_bias,
      "qwen3_moe: Hugging Face's Qwen3MoeForCausalLM chooses experts without a bias, so no config.json "
      "describes a model with moe.load_balance_bias = true; set --moe.load_balance_bias=false to export "
      "to a Hugging Face checkpoint (a run with the bias may start from one: the bias starts at zero)");
  json c = {{"architectures", json::array({architecture(family)})},
            {"model_type", family_name(family)},
            {"hidden_size", a.dim},
            {"intermediate_size", a.ffn_dim},
            {"num_hidden_layers", a.n_layers},
            {"num_attention_heads", a.n_heads},
            {"num_key_value_heads", a.n_kv_heads},
            {"head_dim", a.head_dim},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"use_sliding_window", false},
            {"sliding_window", nullptr},
            {"rms_norm_eps", a.norm_eps},
            {"vocab_size", a.vocab_size},
            {"max_position_embeddings", a.max_seq_len},
            {"tie_word_embeddings", a.tie_embeddings}};
  hf::put_rope(c, layout, a.rope_theta, "default", json::object());
  // transformers 5 spells "no sliding window" out per layer too (max_window_layers, which 4.x
  // wrote as well, only matters with use_sliding_window; its default is kept).
  if (!a.moe && layout == ConfigLayout::transformers5)
    c["layer_types"] = std::vector<std::string>(static_cast<size_t>(a.n_layers), "full_attention");
  if (a.moe)
    c.update({{hf::kNumExpertsKey.in(layout), a.moe->num_experts},
              {"num_experts_per_tok", a.moe->top_k},
              {"moe_intermediate_size", a.moe->hidden_dim},
              {"norm_topk_prob", a.moe->norm_topk_prob},
              {"decoder_sparse_step", 1},
              {"mlp_only_layers", json::array()},
              {"router_aux_loss_coef", a.aux_loss_coeff}});
  return c;
}

ModelArgs parse_hf_config(Family family, const json& j) {
  const char* name = family_name(family);
  const hf::ConfigFields f(j, architecture(family));
  const std::string type = f.string("model_type", "");
  config::require(type == name, "config.json: model_type is \"", type, "\"; titan's ", name, " reads \"",
                  name, "\" (", architecture(family), ") checkpoints");
  ModelArgs a;
  a.dim = f.integer("hidden_size");
  a.ffn_dim = f.integer("intermediate_size");
  a.n_layers = f.integer("num_hidden_layers");
  a.n_heads = f.integer("num_attention_heads");
  a.n_kv_heads = f.integer("num_key_value_heads");
  a.vocab_size = f.integer("vocab_size");
  a.max_seq_len = f.integer("max_position_embeddings", 32768);
  a.norm_eps = f.number("rms_norm_eps", 1e-6);
  const hf::Rope rope = f.rope(10000.0);
  a.rope_theta = rope.theta;
  // Unused (the weights say their dtype), but a file giving two is contradicting itself.
  f.renamed(hf::kDtypeKey, false);
  a.tie_embeddings = f.boolean("tie_word_embeddings", false);
  config::require(
      a.dim > 0 && a.ffn_dim > 0 && a.n_layers > 0 && a.n_heads > 0 && a.vocab_size > 0 &&
          a.max_seq_len > 0 && a.rope_theta > 0 && a.norm_eps >= 0,
      "config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size, "
      "max_position_embeddings and rope_theta must be positive and rms_norm_eps not negative, got ",
      a.dim, ", ", a.ffn_dim, ", ", a.n_layers, ", ", a.n_heads, ", ", a.vocab_size, ", ", a.max_seq_len,
      ", ", a.rope_theta, " and ", a.norm_eps);
  config::require(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "config.json: num_key_value_heads (",
                  a.n_kv_heads, ") must divide num_attention_heads (", a.n_heads, ")");
  // Qwen3Config's default; Qwen3MoeConfig has none, and its attention takes hidden / heads.
  a.head_dim = f.integer("head_dim", family == Family::dense ? 128 : a.dim / a.n_heads);
  config::require(a.head_dim > 0 && a.head_dim % 2 == 0, "config.json: head_dim ", a.head_dim,
                  " must be positive and even (RoPE rotates pairs)");
  const std::string act = f.string("hidden_act", "silu");
  config::require(act == "silu", "config.json: hidden_act \"", act, "\"; titan's ", name,
                  " computes SwiGLU (\"silu\")");
  config::require(!f.boolean("attention_bias", false), "config.json: \"attention_bias\" is true; titan's ",
                  name, " has no biases, so it reads only false (or no such key)");
  config::require(
      !f.boolean("use_sliding_window", false), "config.json: \"use_sliding_window\" is true; titan's ", name,
      " attends over the whole causal context in every layer, so it reads only false (or no such key)");
  if (const json* types = f.find("layer_types")) {
    config::require(types->is_array(), "config.json: \"layer_types\" must be a list, got ", types->dump());
    for (const json& type : *types)
      config::require(type == "full_attention", "config.json: \"layer_types\" holds ", type.dump(),
                      "; titan's ", name,
                      " attends over the whole causal context in every layer (\"full_attention\")");
  }
  config::require(rope.type == "default", "config.json: \"", rope.type_key, "\" is \"", rope.type,
                  "\"; titan's ", name,
                  " implements plain RoPE (rope_type \"default\"), as Qwen 3 is trained");
  if (family == Family::moe) {
    nn::moe::MoEArgs m;
    const std::string experts = f.renamed(hf::kNumExpertsKey, true);
    m.num_experts = f.integer(experts);
    m.top_k = f.integer("num_experts_per_tok");
    m.hidden_dim = f.integer("moe_intermediate_size");
    m.norm_topk_prob = f.boolean("norm_topk_prob", false);
    config::require(m.num_experts > 0 && m.top_k > 0 && m.top_k <= m.num_experts && m.hidden_dim > 0,
                    "config.json: ", experts, " (", m.num_experts, "), num_experts_per_tok (", m.top_k,
                    ") and moe_intermediate_size (", m.hidden_dim,
                    ") must be positive, with num_experts_per_tok <= ", experts);
    const int64_t step = f.integer("decoder_sparse_step", 1);
    config::require(step == 1, "config.json: decoder_sparse_step is ", step,
                    "; titan's qwen3_moe has a mixture of ",
                    "experts in every layer, so it reads only decoder_sparse_step 1");
    const std::vector<int64_t> dense_layers = f.integers("mlp_only_layers");
    config::require(
        dense_layers.empty(), "config.json: mlp_only_layers is ", json(dense_layers).dump(),
        "; titan's qwen3_moe has a mixture of experts in every layer, so it reads only an empty list");
    a.aux_loss_coeff = f.number("router_aux_loss_coef", 0.001);
    config::require(a.aux_loss_coeff >= 0, "config.json: router_aux_loss_coef must not be negative, got ",
                    a.aux_loss_coeff);
    a.moe = m;
  }
  a.validate();
  return a;
}

json imported_hf_config(Family family, const json& config, ConfigLayout layout) {
  return hf::merged_config(config, to_hf_config(parse_hf_config(family, config), layout), layout);
}

std::map<std::string, Shape> hf_shapes(const ModelArgs& a) {
  std::map<std::string, Shape> out = hf::decoder_shapes({.dim = a.dim,
                                                         .n_layers = a.n_layers,
                                                         .n_heads = a.n_heads,
                                                         .n_kv_heads = a.n_kv_heads,
                                                         .head_dim = a.head_dim,
                                                         .vocab_size = a.vocab_size,
                                                         .tie_embeddings = a.tie_embeddings});
  for (int64_t i = 0; i < a.n_layers; ++i) {
    out[hf::hf_block_name(i, "self_attn.q_norm.weight")] = {a.head_dim};
    out[hf::hf_block_name(i, "self_attn.k_norm.weight")] = {a.head_dim};
    if (!a.moe) {
      hf::add_swiglu_shapes(out, hf::hf_block_name(i, "mlp."), a.dim, a.ffn_dim);
      continue;
    }
    out[hf::hf_block_name(i, "mlp.gate.weight")] = {a.moe->num_experts, a.dim};
    for (int64_t e = 0; e < a.moe->num_experts; ++e)
      hf::add_swiglu_shapes(out, hf::hf_block_name(i, std::string(kHfExperts) + std::to_string(e) + "."),
                            a.dim, a.moe->hidden_dim);
  }
  return out;
}

nn::StateDict to_hf(const nn::StateDict& ours, const ModelArgs& args) {
  const char* name = family_name(family_of(args));
  nn::StateDict out;
  for (const auto& [our_name, t] : ours) {
    if (auto hf_name = hf::rename(our_name, true, block_renames(args))) {
      out[*hf_name] = t;
      continue;
    }
    const auto block = hf::split_block(our_name, hf::kOursBlock);
    TITAN_CHECK(
        !(block && block->rest == "moe.router.expert_bias"), name, " to_hf: tensor '", our_name,
        "' has no Hugging Face counterpart: Qwen3MoeForCausalLM chooses experts without a bias, so a "
        "model trained with moe.load_balance_bias = true routes otherwise there; export a model trained "
        "with moe.load_balance_bias = false");
    const hf::Rename* projection =
        block && block->rest.starts_with(kOursExperts)
            ? expert_projection(std::string_view(block->rest).substr(kOursExperts.size()), true)
            : nullptr;
    TITAN_CHECK(projection, name, " to_hf: tensor '", our_name, "' has no Hugging Face name; it is not a ",
                name, " parameter");
    for (int64_t e = 0; e < t.size(0); ++e)
      out[hf_expert_name(block->index, e, *projection)] = t.detach().narrow(0, e, 1).squeeze(0);
  }
  return out;
}

nn::StateDict from_hf(const nn::StateDict& hf_state, const ModelArgs& args) {
  const char* arch = architecture(family_of(args));
  nn::StateDict out;
  // (layer, our projection) -> expert -> HF's tensor.
  std::map<std::pair<int64_t, const hf::Rename*>, std::map<int64_t, Tensor>> experts;
  for (const auto& [hf_name, t] : hf_state) {
    if (auto ours = hf::rename(hf_name, false, block_renames(args))) {
      out[*ours] = t;
      continue;
    }
    const std::optional<HfExpert> x = args.moe ? parse_hf_expert(hf_name) : std::nullopt;
    TITAN_CHECK(x, family_name(family_of(args)), " from_hf: tensor '", hf_name, "' is not one of ", arch,
                "'s");
    experts[{x->layer, x->projection}][x->expert] = t;
  }
  for (const auto& [key, by_expert] : experts) {
    const auto& [layer, projection] = key;
    out[std::string(hf::kOursBlock) + std::to_string(layer) + "." + std::string(kOursExperts) +
        std::string(projection->ours)] = stack_experts(by_expert, layer, *projection, args.moe->num_experts);
  }
  return out;
}

ModelConfig matching_flavor(Family family, const ModelArgs& args, ConfigLayout layout) {
  ModelConfig m;
  m.name = family_name(family);
  // What a job chooses besides the flavor: the vocabulary (model.vocab_size), tying
  // (model.weight_tying) and the balancing loss ([moe] aux_loss_coeff); max_position_embeddings
  // only sizes tables.
  m.flavor = hf::matching_flavor(
      m.name, to_hf_config(args, layout), flavor_names(family),
      [&](const std::string& flavor_name) { return to_hf_config(flavor(family, flavor_name), layout); },
      {"vocab_size", "max_position_embeddings", "tie_word_embeddings", "router_aux_loss_coef"});
  m.vocab_size = args.vocab_size;
  m.weight_tying = args.tie_embeddings;
  if (args.moe) m.moe.aux_loss_coeff = args.aux_loss_coeff;
  return m;
}

}  // namespace titan::models::qwen3
