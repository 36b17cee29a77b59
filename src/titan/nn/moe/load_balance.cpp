#include "titan/nn/moe/load_balance.h"

#include <functional>

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

namespace {

std::function<Tensor(const Tensor&)> per_layer_weights(double weight) {
  return [weight](const Tensor& x) { return ops::scale(x, weight); };
}

// A layer's term of the global loss (its scores summed over its tokens, [experts]) weighed by
// weight * E * C_e / N^2 over all layers in `pooled`, once the forward is done.
std::function<Tensor(const Tensor&)> global_weights(const std::shared_ptr<PooledChoices>& pooled,
                                                    double weight, int64_t experts, DType dtype) {
  return [pooled, weight, experts, dtype](const Tensor& x) {
    double tokens = 0;
    for (const auto& [l, n] : pooled->tokens) tokens += static_cast<double>(n);
    if (!pooled->summed.defined())
      for (const auto& [l, counts] : pooled->tokens_per_expert) {
        const Tensor c = counts.to(dtype);
        pooled->summed = pooled->summed.defined() ? ops::add(pooled->summed, c) : c;
      }
    return ops::mul(ops::scale(pooled->summed, weight * static_cast<double>(experts) / (tokens * tokens)), x);
  };
}

}  // namespace

Tensor attach_per_layer_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                             nn::AuxiliaryLosses& losses) {
  const int64_t experts = routing.scores.size(-1);
  const double choices = static_cast<double>(routing.ids.numel());
  Tensor f = ops::scale(routing.tokens_per_expert.to(routing.scores.dtype()), 1.0 / choices);
  Tensor loss = ops::sum(f * ops::mean(routing.scores, 0)) * static_cast<double>(experts);
  return losses.attach(out, loss, per_layer_weights(weight), layer);
}

Tensor attach_global_loss(const Tensor& out, const Routing& routing, int64_t layer, double weight,
                          const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses) {
  if (pooled->tokens_per_expert.emplace(layer, routing.tokens_per_expert).second) pooled->summed = Tensor();
  pooled->tokens.emplace(layer, routing.scores.size(0));
  return losses.attach(out, ops::sum(routing.scores, 0),
                       global_weights(pooled, weight, routing.scores.size(-1), routing.scores.dtype()),
                       layer);
}

std::vector<Tensor> take_loss(LoadBalanceLoss scope, int64_t layer,
                              const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses) {
  std::vector<Tensor> out{losses.take(layer)};
  if (scope == LoadBalanceLoss::per_layer) return out;
  out.push_back(pooled->tokens_per_expert.at(layer));
  out.push_back(Tensor::scalar<int64_t>(pooled->tokens.at(layer)));
  pooled->tokens_per_expert.erase(layer);
  pooled->tokens.erase(layer);
  pooled->summed = Tensor();
  return out;
}

void count_loss(LoadBalanceLoss scope, const std::vector<Tensor>& taken, int64_t layer, double weight,
                const std::shared_ptr<PooledChoices>& pooled, nn::AuxiliaryLosses& losses) {
  const Tensor& term = taken.at(0);
  if (scope == LoadBalanceLoss::per_layer) {
    losses.count(term, per_layer_weights(weight), layer);
    return;
  }
  TITAN_CHECK(taken.size() == 3 && !taken[2].is_lazy(),
              "moe::count_loss: expected the term, the choices and a ",
              "host count of tokens that take_loss gave, got ", taken.size(), " tensors");
  pooled->tokens_per_expert[layer] = taken[1];
  pooled->tokens[layer] = static_cast<int64_t>(taken[2].item());
  pooled->summed = Tensor();
  losses.count(term, global_weights(pooled, weight, term.size(-1), term.dtype()), layer);
}

}  // namespace titan::nn::moe
