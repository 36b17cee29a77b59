#include "titan/models/qwen3/parallelize.h"

#include "titan/models/common/parallelize.h"
#include "titan/models/qwen3/model.h"

namespace titan::models::qwen3 {

void apply_tp(CausalLM& model, parallel::TpStyles& tp) {
  auto& qwen = common::as_family<Transformer>(model, "qwen3::apply_tp", "qwen3");
  common::apply_decoder_tp(qwen, tp, [&] {
    for (const auto& block : *qwen.layers) {
      common::apply_attention_tp(tp, *block->attention_norm, *block->attention);
      if (block->moe)
        common::apply_replicated_feed_forward_tp(tp, *block->ffn_norm, *block->moe);
      else
        common::apply_feed_forward_tp(tp, *block->ffn_norm, *block->feed_forward);
    }
  });
}

Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto& qwen = common::as_family<Transformer>(model, "qwen3::parallelize", "qwen3");
  return common::parallelize_decoder(qwen, options,
                                     {.apply_tp = apply_tp, .apply_ep = [&qwen](parallel::ExpertParallel& ep) {
                                        for (const auto& block : *qwen.layers)
                                          if (block->moe) ep.apply(*block->moe);
                                      }});
}

}  // namespace titan::models::qwen3
