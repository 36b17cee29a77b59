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
                             autograd::AuxiliaryLosses& losses) {
  const int64_t experts = routing.scores.size(-1);
  const double choices = static_cast<double>(routing.ids.numel());
  std::vector<double> share(routing.tokens_per_expert.begin(), routing.tokens_per_expert.end());
  for (double& s : share) s /= choices;
  Tensor f = Tensor::from_vector(share, {experts}).to(routing.scores.dtype());
  Tensor loss = ops::sum(f * ops::mean(routing.scores, 0)) * static_cast<double>(experts);
  return losses.attach(out, loss, weight, layer);
}

Tensor attach_global_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                          const std::shared_ptr<PooledChoices>& pooled, autograd::AuxiliaryLosses& losses) {
  const int64_t experts = routing.scores.size(-1);
  pooled->tokens_per_expert[layer] = routing.tokens_per_expert;
  pooled->tokens[layer] = routing.scores.size(0);
  auto weights = [pooled, weight, experts, dtype = routing.scores.dtype()](double scale) {
    double tokens = 0;
    for (const auto& [l, n] : pooled->tokens) tokens += static_cast<double>(n);
    std::vector<double> w(static_cast<size_t>(experts), 0.0);
    for (const auto& [l, counts] : pooled->tokens_per_expert)
      for (int64_t e = 0; e < experts; ++e) w[e] += static_cast<double>(counts[e]);
    for (double& x : w) x *= scale * weight * static_cast<double>(experts) / (tokens * tokens);
    return Tensor::from_vector(w, {experts}).to(dtype);
  };
  return losses.attach(out, ops::sum(routing.scores, 0), weights, layer);
}

}  // namespace titan::nn::moe
