#include "titan/nn/moe/token_dispatcher.h"

#include <algorithm>
#include <cmath>

#include "titan/ops/arith.h"
#include "titan/ops/embedding.h"
#include "titan/ops/reduce.h"

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

CapacityTokenDispatcher::CapacityTokenDispatcher(double capacity_factor) : capacity_factor_(capacity_factor) {
  TITAN_CHECK(capacity_factor >= 0, "moe.capacity_factor must be >= 0 (0: no pair dropped), got ", capacity_factor);
}

int64_t CapacityTokenDispatcher::capacity(int64_t tokens, int64_t k, int64_t num_experts) const {
  if (capacity_factor_ == 0) return tokens;
  const double share = capacity_factor_ * static_cast<double>(tokens * k) / static_cast<double>(num_experts);
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(share)), 1, tokens);
}

TokenDispatcher::Dispatched CapacityTokenDispatcher::dispatch(const Tensor& x, const Tensor& ids,
                                                              int64_t num_experts) {
  Dispatched d;
  const int64_t c = capacity(ids.size(0), ids.size(1), num_experts);
  d.slots = ops::expert_slots(ids, num_experts, c);
  // An empty slot computes on row 0; nothing reads its output, so its gradient is zero.
  d.rows = ops::embedding(d.slots.token_of_slot, x);
  d.rows_per_expert = std::vector<int64_t>(static_cast<size_t>(num_experts), c);
  return d;
}

Tensor CapacityTokenDispatcher::combine(const Tensor& expert_out, const Tensor& weights,
                                        const Dispatched& dispatched) {
  const ops::ExpertSlots& s = dispatched.slots;
  const int64_t tokens = weights.size(0), k = weights.size(1), dim = expert_out.size(1);
  const Tensor kept_weights = (weights.reshape({tokens * k}) * s.pair_kept.to(weights.dtype())).reshape({tokens * k, 1});
  return ops::sum((ops::embedding(s.slot_of_pair, expert_out) * kept_weights).reshape({tokens, k, dim}), 1);
}

}  // namespace titan::nn::moe
