#include "titan/models/llama3/parallelize.h"

#include "titan/models/common/parallelize.h"
#include "titan/models/llama3/model.h"

namespace titan::models::llama3 {

void apply_tp(CausalLM& model, parallel::TpStyles& tp) {
  auto& llama = common::as_family<Transformer>(model, "llama3::apply_tp", "llama3");
  common::apply_decoder_tp(llama, tp, [&] {
    for (const auto& block : *llama.layers) {
      common::apply_attention_tp(tp, *block->attention_norm, *block->attention);
      common::apply_feed_forward_tp(tp, *block->ffn_norm, *block->feed_forward);
    }
  });
}

Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options) {
  return common::parallelize_decoder(common::as_family<Transformer>(model, "llama3::parallelize", "llama3"),
                                     options, {.apply_tp = apply_tp});
}

}  // namespace titan::models::llama3
