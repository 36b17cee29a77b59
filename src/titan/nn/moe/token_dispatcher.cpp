#include "titan/nn/moe/token_dispatcher.h"

namespace titan::nn::moe {

TokenDispatcher::Dispatched LocalTokenDispatcher::dispatch(const Tensor& x, const Tensor& ids,
                                                           int64_t num_experts) {
  Dispatched d;
  d.permutation = ops::sort_by_expert(ids, num_experts);
  d.rows = ops::permute_tokens(x, d.permutation);
  d.rows_per_expert = d.permutation.tokens_per_expert;
  return d;
}

Tensor LocalTokenDispatcher::combine(const Tensor& expert_out, const Tensor& weights,
                                     const Dispatched& dispatched) {
  return ops::unpermute_tokens(expert_out, weights, dispatched.permutation);
}

}  // namespace titan::nn::moe
