#include "titan/data/sft_config.h"

namespace titan::data {

void declare_keys(config::Keys<SftConfig>& keys) {
  using C = SftConfig;
  keys.add("prompt_field", &C::prompt_field, config::non_empty(),
           "JSONL: the field holding an example's prompt (no loss on its tokens)")
      .add(
          "completion_field", &C::completion_field, config::non_empty(),
          "JSONL: the field holding an example's completion (the loss is on its tokens and the eos after it)")
      .add("over_length", &C::over_length, config::one_of({"truncate", "skip", "error"}),
           "an example longer than training.seq_len tokens: cut to seq_len, skip and count, or stop")
      .add("packing", &C::packing, {},
           "pack whole examples into each row of seq_len tokens; false: one example per row");
}

}  // namespace titan::data
