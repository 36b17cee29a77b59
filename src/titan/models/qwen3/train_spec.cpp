#include "titan/models/qwen3/train_spec.h"

#include "titan/models/qwen3/model.h"
#include "titan/models/qwen3/parallelize.h"
#include "titan/models/qwen3/state_dict_adapter.h"

namespace titan::models::qwen3 {

namespace {

// The flavor's args with the job's overrides applied, after checking the choices that cannot be
// honoured.
ModelArgs args_from(Family family, const ModelConfig& cfg) {
  const char* name = family_name(family);
  TITAN_CHECK(cfg.attention == "reference" || cfg.attention == "splash", name, ": unknown model.attention '",
              cfg.attention, "'; choose \"splash\" (block-sparse flash attention) or \"reference\"");
  TITAN_CHECK(cfg.vocab_size >= 0, name, ": model.vocab_size must be 0 (the flavor's own) or positive, got ",
              cfg.vocab_size);
  ModelArgs args = flavor(family, cfg.flavor);
  if (cfg.vocab_size > 0) args.vocab_size = cfg.vocab_size;
  if (cfg.n_layers > 0) args.n_layers = cfg.n_layers;
  if (cfg.weight_tying) args.tie_embeddings = *cfg.weight_tying;
  if (!args.moe) check_no_moe_keys(cfg, std::string(name) + "/" + cfg.flavor);
  if (args.moe) {
    args.aux_loss_coeff = cfg.moe.aux_loss_coeff;
    args.load_balance_loss = nn::moe::load_balance_loss_from_name(cfg.moe.load_balance_loss);
    args.moe->load_balance_bias = cfg.moe.load_balance_bias;
    args.moe->bias_update_rate = cfg.moe.bias_update_rate;
    args.moe->capacity_factor = cfg.moe.capacity_factor;
  }
  return args;
}

TrainSpec train_spec(Family family) {
  TrainSpec spec;
  spec.name = family_name(family);
  spec.flavors = flavor_names(family);
  spec.build = [family](const ModelConfig& cfg, int64_t max_seq_len,
                        Generator& gen) -> std::shared_ptr<CausalLM> {
    ModelArgs args = args_from(family, cfg);
    args.max_seq_len = max_seq_len;
    auto model = std::make_shared<Transformer>(
        args, TensorOptions{},
        common::AttentionKernel{cfg.attention == "splash", cfg.attn.block_q, cfg.attn.block_kv});
    // Under a MetaScope the parameters have no memory yet: parallel::deferred_init fills each
    // rank's shards after the plans have split them.
    if (!MetaScope::active()) model->init_weights(gen);
    return model;
  };
  spec.summarize = [family, name = spec.name](const ModelConfig& cfg, int64_t seq_len) {
    ModelSummary s = summarize(args_from(family, cfg), seq_len);
    s.description = name + " " + cfg.flavor + ": " + s.description;
    return s;
  };
  spec.parallelize = parallelize;
  spec.plan_tp = apply_tp;
  spec.state_dict_adapter = StateDictAdapter{
      .hf_model_types = {spec.name},
      .hf_config = [family](const ModelConfig& cfg,
                            ConfigLayout layout) { return to_hf_config(args_from(family, cfg), layout); },
      .from_hf_config =
          [family](const nlohmann::json& c) {
            return matching_flavor(family, parse_hf_config(family, c), common::hf::layout_of(c));
          },
      .hf_shapes = [family](const nlohmann::json& c) { return hf_shapes(parse_hf_config(family, c)); },
      .to_hf = [family](const nn::StateDict& s,
                        const nlohmann::json& c) { return to_hf(s, parse_hf_config(family, c)); },
      .from_hf = [family](const nn::StateDict& s,
                          const nlohmann::json& c) { return from_hf(s, parse_hf_config(family, c)); },
      .imported_hf_config = [family](const nlohmann::json& c,
                                     ConfigLayout layout) { return imported_hf_config(family, c, layout); },
  };
  return spec;
}

}  // namespace

TrainSpec dense_train_spec() {
  return train_spec(Family::dense);
}

TrainSpec moe_train_spec() {
  return train_spec(Family::moe);
}

}  // namespace titan::models::qwen3
