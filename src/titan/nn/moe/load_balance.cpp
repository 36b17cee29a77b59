#include "titan/nn/moe/load_balance.h"

#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"

namespace titan::nn::moe {

LoadBalanceLoss load_balance_loss_from_name(const std::string& name) {
  if (name == "per_layer") return LoadBalanceLoss::per_layer;
  if (name == "global") return LoadBalanceLoss::global;
  TITAN_CHECK(false, "moe.load_balance_loss: unknown value '", name,
              "'; choose \"per_layer\" (the mean of each MoE layer's loss) or \"global\" (one loss over "
              "all layers' tokens, as transformers' Qwen3MoeForCausalLM)");
  return LoadBalanceLoss::per_layer;
}

Tensor attach_per_layer_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                             nn::AuxiliaryLosses& losses) {
  const int64_t experts = routing.scores.size(-1);
  const double choices = static_cast<double>(routing.ids.numel());
  Tensor f = ops::scale(routing.tokens_per_expert.to(routing.scores.dtype()), 1.0 / choices);
  Tensor loss = ops::sum(f * ops::mean(routing.scores, 0)) * static_cast<double>(experts);
  return losses.attach(out, loss, weight, layer);
}

Tensor attach_global_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                          const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses) {
  const int64_t experts = routing.scores.size(-1);
  pooled->tokens_per_expert[layer] = routing.tokens_per_expert;
  pooled->tokens[layer] = routing.scores.size(0);
  auto weigh = [pooled, weight, experts, dtype = routing.scores.dtype()](const Tensor& x) {
    double tokens = 0;
    for (const auto& [l, n] : pooled->tokens) tokens += static_cast<double>(n);
    Tensor choices;
    for (const auto& [l, counts] : pooled->tokens_per_expert) {
      const Tensor c = counts.to(dtype);
      choices = choices.defined() ? ops::add(choices, c) : c;
    }
    return ops::mul(ops::scale(choices, weight * static_cast<double>(experts) / (tokens * tokens)), x);
  };
  return losses.attach(out, ops::sum(routing.scores, 0), weigh, layer);
}

}  // namespace titan::nn::moe
