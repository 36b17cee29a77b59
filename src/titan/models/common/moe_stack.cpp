#include "titan/models/common/moe_stack.h"

#include <string>

namespace titan::models::common {

MoeStack::MoeStack(std::vector<nn::moe::MoE*> layers, double aux_loss_coeff, nn::moe::LoadBalanceLoss balance,
                   bool capped)
    : layers_(std::move(layers)), aux_loss_coeff_(aux_loss_coeff), balance_(balance), capped_(capped) {
  for (nn::moe::MoE* m : layers_) moe_layers_ += m != nullptr;
}

std::shared_ptr<nn::moe::MoEPass> MoeStack::new_pass(bool inference) {
  if (empty()) return nullptr;
  auto pass = std::make_shared<nn::moe::MoEPass>();
  pass->load_balance_loss = balance_;
  pass->aux_loss_weight = inference ? 0
                          : balance_ == nn::moe::LoadBalanceLoss::global
                              ? aux_loss_coeff_
                              : aux_loss_coeff_ / static_cast<double>(moe_layers_);
  if (!inference) last_pass_ = pass;
  return pass;
}

std::vector<Tensor> MoeStack::take_loop_reports(nn::moe::MoE* moe, const std::shared_ptr<nn::moe::MoEPass>& pass) {
  return moe ? moe->take_loop_reports(*pass) : std::vector<Tensor>{};
}

void MoeStack::give_loop_reports(nn::moe::MoE* moe, const std::shared_ptr<nn::moe::MoEPass>& pass,
                                 std::vector<Tensor> reports) {
  if (moe) moe->give_loop_reports(*pass, std::move(reports));
}

Tensor MoeStack::auxiliary_loss() const {
  if (!last_pass_ || last_pass_->aux_loss_weight == 0) return Tensor();
  return last_pass_->aux_losses.total();
}

NamedScalars MoeStack::end_step() {
  if (empty()) return {};
  std::vector<std::vector<int64_t>> counts;
  NamedScalars dropped_by_layer;
  int64_t routed = 0, dropped = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    nn::moe::MoE* moe = layers_[l];
    if (!moe) continue;
    std::vector<int64_t> layer_counts = moe->end_step();
    int64_t layer_routed = 0;
    for (int64_t c : layer_counts) layer_routed += c;
    // A layer of another pipeline stage runs on another rank.
    if (layer_routed == 0) continue;
    routed += layer_routed;
    counts.push_back(std::move(layer_counts));
    dropped += moe->dropped();
    if (moe->dropped() > 0)
      dropped_by_layer.emplace_back("moe/dropped_layer" + std::to_string(l), static_cast<double>(moe->dropped()));
  }
  if (routed == 0) return {};  // no training forward since the last step
  const nn::moe::ExpertLoad load = nn::moe::expert_load(counts);
  NamedScalars out{{"moe/tokens_min", static_cast<double>(load.min)},
                   {"moe/tokens_max", static_cast<double>(load.max)},
                   {"moe/tokens_cv", load.cv}};
  // Only a capped layer drops, so a dropless run's line stays as it was.
  if (capped_ || dropped > 0) {
    out.emplace_back("moe/dropped", static_cast<double>(dropped));
    out.insert(out.end(), dropped_by_layer.begin(), dropped_by_layer.end());
  }
  return out;
}

std::vector<Tensor> MoeStack::take_step_records() {
  std::vector<Tensor> out;
  records_per_layer_.clear();
  for (nn::moe::MoE* moe : layers_) {
    std::vector<Tensor> r = moe ? moe->take_records() : std::vector<Tensor>{};
    records_per_layer_.push_back(r.size());
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

void MoeStack::put_step_records(std::vector<Tensor> records) {
  size_t expected = 0;
  for (size_t n : records_per_layer_) expected += n;
  TITAN_CHECK(records.size() == expected, "MoeStack::put_step_records: ", records.size(),
              " records where take_step_records gave ", expected);
  size_t at = 0;
  for (size_t l = 0; l < records_per_layer_.size(); ++l) {
    if (records_per_layer_[l] == 0) continue;
    const auto first = records.begin() + static_cast<std::ptrdiff_t>(at);
    layers_[l]->put_records({first, first + static_cast<std::ptrdiff_t>(records_per_layer_[l])});
    at += records_per_layer_[l];
  }
}

}  // namespace titan::models::common
