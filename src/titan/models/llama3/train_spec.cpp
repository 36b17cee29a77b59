#include "titan/models/llama3/train_spec.h"

#include "titan/models/llama3/model.h"
#include "titan/models/llama3/parallelize.h"
#include "titan/models/llama3/state_dict_adapter.h"

namespace titan::models::llama3 {

namespace {

// The flavor's args with the job's overrides applied, after checking the choices this family
// cannot honour.
ModelArgs args_from(const ModelConfig& cfg) {
  TITAN_CHECK(cfg.attention == "reference" || cfg.attention == "splash", "llama3: unknown model.attention '",
              cfg.attention, "'; choose \"splash\" (block-sparse flash attention) or \"reference\"");
  TITAN_CHECK(!cfg.weight_tying.value_or(false),
              "llama3: model.weight_tying is not supported: like TorchTitan's Llama 3, every "
              "flavor keeps a separate output projection. Set model.weight_tying = false");
  TITAN_CHECK(cfg.vocab_size >= 0, "llama3: model.vocab_size must be 0 (the flavor's own) or positive, got ",
              cfg.vocab_size);
  check_no_moe_keys(cfg, "llama3/" + cfg.flavor);
  ModelArgs args = flavor(cfg.flavor);
  if (cfg.vocab_size > 0) args.vocab_size = cfg.vocab_size;
  if (cfg.n_layers > 0) args.n_layers = cfg.n_layers;
  return args;
}

}  // namespace

TrainSpec train_spec() {
  TrainSpec spec;
  spec.name = "llama3";
  spec.flavors = flavor_names();
  spec.build = [](const ModelConfig& cfg, int64_t max_seq_len, Generator& gen) -> std::shared_ptr<CausalLM> {
    ModelArgs args = args_from(cfg);
    args.max_seq_len = max_seq_len;
    auto model = std::make_shared<Transformer>(
        args, TensorOptions{},
        AttentionKernel{cfg.attention == "splash", cfg.attn.block_q, cfg.attn.block_kv});
    // Under a MetaScope the parameters have no memory yet: parallel::deferred_init fills each
    // rank's shards after the plans have split them.
    if (!MetaScope::active()) model->init_weights(gen);
    return model;
  };
  spec.summarize = [](const ModelConfig& cfg, int64_t seq_len) {
    ModelSummary s = summarize(args_from(cfg), seq_len);
    s.description = "llama3 " + cfg.flavor + ": " + s.description;
    return s;
  };
  spec.parallelize = parallelize;
  spec.plan_tp = apply_tp;
  spec.state_dict_adapter = StateDictAdapter{
      .hf_model_types = {"llama"},
      .hf_config = [](const ModelConfig& cfg,
                      ConfigLayout layout) { return to_hf_config(args_from(cfg), layout); },
      .from_hf_config = [](const nlohmann::json& c) { return matching_flavor(parse_hf_config(c)); },
      .hf_shapes = [](const nlohmann::json& c) { return hf_shapes(parse_hf_config(c)); },
      .to_hf = [](const nn::StateDict& s,
                  const nlohmann::json& c) { return to_hf(s, parse_hf_config(c).args); },
      .from_hf = [](const nn::StateDict& s,
                    const nlohmann::json& c) { return from_hf(s, parse_hf_config(c)); },
      .imported_hf_config = imported_hf_config,
  };
  return spec;
}

}  // namespace titan::models::llama3
