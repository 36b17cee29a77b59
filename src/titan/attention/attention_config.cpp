#include "titan/attention/attention_config.h"

namespace titan::attention {

void declare_keys(config::Keys<AttentionConfig>& keys) {
  using C = AttentionConfig;
  keys.add("block_q", &C::block_q, config::at_least_one(), "queries per tile")
      .add("block_kv", &C::block_kv, config::at_least_one(), "keys per tile")
      .add("document_masking", &C::document_masking, {},
           "packed documents attend only within themselves (a new document after each eos)");
}

}  // namespace titan::attention
