#include "titan/nn/moe/moe.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace titan::nn::moe {

void MoEArgs::validate() const {
  TITAN_CHECK(
      num_experts >= 1 && top_k >= 1 && top_k <= num_experts && hidden_dim >= 1,
      "MoEArgs: expected num_experts >= 1, 1 <= top_k <= num_experts and hidden_dim >= 1, got num_experts=",
      num_experts, " top_k=", top_k, " hidden_dim=", hidden_dim);
  TITAN_CHECK(bias_update_rate >= 0, "MoEArgs: bias_update_rate must be >= 0, got ", bias_update_rate);
  TITAN_CHECK(capacity_factor >= 0, "MoEArgs: capacity_factor must be >= 0 (0: no cap), got ", capacity_factor);
}

MoE::MoE(int64_t layer_id, int64_t dim, const MoEArgs& args, double init_std, TensorOptions opts)
    : layer_id_(layer_id), args_(args) {
  args_.validate();
  router = register_module(
      "router", std::make_shared<TopKRouter>(dim, args.num_experts, args.top_k, args.norm_topk_prob,
                                             args.load_balance_bias, init_std, opts));
  experts = register_module(
      "experts", std::make_shared<GroupedExperts>(args.num_experts, dim, args.hidden_dim, init_std, opts));
  if (args.capacity_factor > 0)
    dispatcher = std::make_shared<CapacityTokenDispatcher>(args.capacity_factor);
  else
    dispatcher = std::make_shared<LocalTokenDispatcher>();
}

Tensor MoE::forward(const Tensor& x, MoEPass& pass) {
  const int64_t dim = x.size(-1);
  Tensor tokens = x.reshape({-1, dim});
  Routing r = router->route(tokens);
  TokenDispatcher::Dispatched d = dispatcher->dispatch(tokens, r.ids, args_.num_experts);
  Tensor out = dispatcher->combine((*experts)(d.rows, d.rows_per_expert), r.weights, d);

  // A re-run (activation checkpointing, a layer loop's backward) reports nothing again.
  if (pass.layers_run.insert(layer_id_).second && is_training()) {
    records_.push_back(r.tokens_per_expert);
    records_.push_back(d.slots.dropped.defined() ? d.slots.dropped : Tensor::scalar<int64_t>(0));
  }

  if (pass.aux_loss_weight > 0)
    out = pass.load_balance_loss == LoadBalanceLoss::global
              ? attach_global_loss(out, r, layer_id_, pass.aux_loss_weight, pass.pooled_choices,
                                   pass.aux_losses)
              : attach_per_layer_loss(out, r, layer_id_, pass.aux_loss_weight, pass.aux_losses);
  return out.view(x.sizes());
}

std::vector<Tensor> MoE::take_records() {
  return std::exchange(records_, {});
}

void MoE::put_records(std::vector<Tensor> records) {
  TITAN_CHECK(records.size() % 2 == 0, "moe::MoE::put_records: expected (tokens per expert, dropped) pairs, got ",
              records.size(), " tensors");
  records_.insert(records_.end(), records.begin(), records.end());
}

std::vector<Tensor> MoE::take_loop_reports(MoEPass& pass) {
  std::vector<Tensor> out;
  if (is_training()) {
    TITAN_CHECK(records_.size() >= 2, "moe::MoE::take_loop_reports: layer ", layer_id_,
                " recorded nothing in the loop's body");
    out.assign(records_.end() - 2, records_.end());
    records_.resize(records_.size() - 2);
  }
  if (pass.aux_loss_weight > 0) {
    const std::vector<Tensor> loss =
        take_loss(pass.load_balance_loss, layer_id_, pass.pooled_choices, pass.aux_losses);
    out.insert(out.end(), loss.begin(), loss.end());
  }
  return out;
}

void MoE::give_loop_reports(MoEPass& pass, std::vector<Tensor> reports) {
  pass.layers_run.insert(layer_id_);
  auto at = reports.begin();
  if (is_training()) {
    TITAN_CHECK(reports.size() >= 2, "moe::MoE::give_loop_reports: ", reports.size(),
                " reports where take_loop_reports gives a record pair first");
    records_.insert(records_.end(), at, at + 2);
    at += 2;
  }
  if (pass.aux_loss_weight > 0)
    count_loss(pass.load_balance_loss, {at, reports.end()}, layer_id_, pass.aux_loss_weight,
               pass.pooled_choices, pass.aux_losses);
}

std::vector<int64_t> MoE::end_step() {
  std::vector<int64_t> counts(static_cast<size_t>(args_.num_experts), 0);
  dropped_ = 0;
  for (size_t i = 0; i < records_.size(); i += 2) {
    const Tensor c = records_[i].contiguous();
    TITAN_CHECK(c.dtype() == kI64 && c.numel() == args_.num_experts, "moe::MoE::end_step: a record of ", c.desc(),
                " for ", args_.num_experts, " experts");
    for (int64_t e = 0; e < args_.num_experts; ++e) counts[e] += c.data<int64_t>()[e];
    dropped_ += static_cast<int64_t>(records_[i + 1].item());
  }
  records_.clear();
  if (count_reducer) count_reducer(counts);
  // A layer that routed nothing (one of another pipeline stage) has nothing to balance.
  const bool routed = std::any_of(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });
  if (args_.load_balance_bias && routed) router->update_expert_bias(counts, args_.bias_update_rate);
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
