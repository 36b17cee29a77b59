#include "titan/models/model_config.h"

#include "titan/core/error.h"

namespace titan::models {

void declare_keys(config::Keys<ModelConfig>& keys) {
  using C = ModelConfig;
  keys.add("name", &C::name, config::non_empty(), "model family in the registry, e.g. llama3")
      .add("flavor", &C::flavor, config::non_empty(), "size preset of the family, e.g. debugmodel, 8B")
      .add("attention", &C::attention, config::one_of({"reference", "splash"}),
           "attention kernel: block-sparse splash, or the reference that materialises the scores")
      .add("vocab_size", &C::vocab_size, config::non_negative(),
           "0: the flavor's; else overrides it (e.g. the tokenizer's size)")
      .add("n_layers", &C::n_layers, config::non_negative(),
           "0: the flavor's; else overrides its number of blocks (a deeper or shallower model of its width)")
      .add("weight_tying", &C::weight_tying, {},
           "share the embedding with the output projection; unset: as the flavor does")
      .add("tokenizer_path", &C::tokenizer_path, {},
           "a folder holding a Hugging Face tokenizer.json (or the file); empty: the byte tokenizer")
      .add("hf_config", &C::hf_config, {},
           "name = \"hf\": the model's Hugging Face config.json, or a folder holding one; empty: "
           "checkpoint.initial_load_path's")
      .check([](const C& c, config::Problems& problems) {
        if (!c.hf_config.empty() && c.name != "hf")
          problems.add("model.hf_config is read by model.name = \"hf\" only (this job trains \"" + c.name +
                       "\"); remove it, or set model.name = \"hf\"");
        if (c.attn.document_masking && c.attention != "splash")
          problems.add(
              "attention.document_masking = true needs model.attention = \"splash\" (the reference path is "
              "causal only); set one of them");
      });
}

void check_no_moe_keys(const ModelConfig& cfg, const std::string& model) {
  const nn::moe::MoeConfig defaults;
  if (cfg.moe == defaults) return;
  std::string set;
  auto note = [&](const char* key, bool differs, const std::string& value) {
    if (differs) set += (set.empty() ? "" : ", ") + std::string("moe.") + key + " = " + value;
  };
  note("aux_loss_coeff", cfg.moe.aux_loss_coeff != defaults.aux_loss_coeff,
       config::format_value(cfg.moe.aux_loss_coeff));
  note("load_balance_loss", cfg.moe.load_balance_loss != defaults.load_balance_loss,
       config::format_value(cfg.moe.load_balance_loss));
  note("load_balance_bias", cfg.moe.load_balance_bias != defaults.load_balance_bias,
       cfg.moe.load_balance_bias ? "true" : "false");
  note("bias_update_rate", cfg.moe.bias_update_rate != defaults.bias_update_rate,
       config::format_value(cfg.moe.bias_update_rate));
  note("capacity_factor", cfg.moe.capacity_factor != defaults.capacity_factor,
       config::format_value(cfg.moe.capacity_factor));
  throw Error(
      set + ": [moe] keys are set, but " + model +
      " has no experts for them to act on; drop the [moe] section, or train a mixture-of-experts model "
      "(e.g. model.name = \"qwen3_moe\")");
}

}  // namespace titan::models
