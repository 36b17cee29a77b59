#include "titan/nn/moe/moe.h"

#include <algorithm>
#include <cmath>

namespace titan::nn::moe {

void MoEArgs::validate() const {
  TITAN_CHECK(
      num_experts >= 1 && top_k >= 1 && top_k <= num_experts && hidden_dim >= 1,
      "MoEArgs: expected num_experts >= 1, 1 <= top_k <= num_experts and hidden_dim >= 1, got num_experts=",
      num_experts, " top_k=", top_k, " hidden_dim=", hidden_dim);
  TITAN_CHECK(bias_update_rate >= 0, "MoEArgs: bias_update_rate must be >= 0, got ", bias_update_rate);
}

MoE::MoE(int64_t layer_id, int64_t dim, const MoEArgs& args, double init_std, TensorOptions opts)
    : layer_id_(layer_id), args_(args) {
  args_.validate();
  router = register_module(
      "router", std::make_shared<TopKRouter>(dim, args.num_experts, args.top_k, args.norm_topk_prob,
                                             args.load_balance_bias, init_std, opts));
  experts = register_module(
      "experts", std::make_shared<GroupedExperts>(args.num_experts, dim, args.hidden_dim, init_std, opts));
  dispatcher = std::make_shared<LocalTokenDispatcher>();
  tokens_per_expert_.assign(static_cast<size_t>(args.num_experts), 0);
}

Tensor MoE::forward(const Tensor& x, MoEPass& pass) {
  const int64_t dim = x.size(-1);
  Tensor tokens = x.reshape({-1, dim});
  Routing r = router->route(tokens);
  TokenDispatcher::Dispatched d = dispatcher->dispatch(tokens, r.ids, args_.num_experts);
  Tensor out = dispatcher->combine((*experts)(d.rows, d.rows_per_expert), r.weights, d);

  if (is_training() && pass.layers_run.insert(layer_id_).second)
    for (int64_t e = 0; e < args_.num_experts; ++e) tokens_per_expert_[e] += r.tokens_per_expert[e];

  if (pass.aux_loss_weight > 0)
    out = pass.load_balance_loss == LoadBalanceLoss::global
              ? attach_global_loss(out, r, layer_id_, pass.aux_loss_weight, pass.pooled_choices,
                                   pass.aux_losses)
              : attach_per_layer_loss(out, r, layer_id_, pass.aux_loss_weight, pass.aux_losses);
  return out.view(x.sizes());
}

std::vector<int64_t> MoE::end_step() {
  std::vector<int64_t> counts = tokens_per_expert_;
  if (count_reducer) count_reducer(counts);
  // A layer that routed nothing (one of another pipeline stage) has nothing to balance.
  const bool routed = std::any_of(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });
  if (args_.load_balance_bias && routed) router->update_expert_bias(counts, args_.bias_update_rate);
  tokens_per_expert_.assign(counts.size(), 0);
  return counts;
}

ExpertLoad expert_load(const std::vector<std::vector<int64_t>>& tokens_per_expert_by_layer) {
  TITAN_CHECK(!tokens_per_expert_by_layer.empty(), "moe::expert_load: no layers given");
  ExpertLoad load;
  load.min = INT64_MAX;
  for (const std::vector<int64_t>& counts : tokens_per_expert_by_layer) {
    TITAN_CHECK(!counts.empty(), "moe::expert_load: a layer with no experts");
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    load.min = std::min(load.min, *lo);
    load.max = std::max(load.max, *hi);
    const double n = static_cast<double>(counts.size());
    double mean = 0, var = 0;
    for (int64_t c : counts) mean += static_cast<double>(c) / n;
    for (int64_t c : counts) var += (static_cast<double>(c) - mean) * (static_cast<double>(c) - mean) / n;
    load.cv +=
        (mean > 0 ? std::sqrt(var) / mean : 0.0) / static_cast<double>(tokens_per_expert_by_layer.size());
  }
  return load;
}

}  // namespace titan::nn::moe
