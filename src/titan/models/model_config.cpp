#include "titan/models/model_config.h"

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

}  // namespace titan::models
