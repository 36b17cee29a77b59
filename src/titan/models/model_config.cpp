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
      .add("weight_tying", &C::weight_tying, {},
           "share the embedding with the output projection; unset: as the flavor does")
      .add("tokenizer_path", &C::tokenizer_path, {},
           "a folder holding a Hugging Face tokenizer.json (or the file); empty: the byte tokenizer")
      .check([](const C& c, config::Problems& problems) {
        if (c.attn.document_masking && c.attention != "splash")
          problems.add(
              "attention.document_masking = true needs model.attention = \"splash\" (the reference path is "
              "causal only); set one of them");
      });
}

void check_no_moe_keys(const ModelConfig& cfg, const std::string& model) {
  if (cfg.moe == nn::moe::MoeConfig{}) return;
  throw Error("[moe] keys are set, but " + model +
              " has no experts for them to act on; drop the [moe] section, or train a mixture-of-experts model "
              "(e.g. model.name = \"qwen3_moe\")");
}

}  // namespace titan::models
