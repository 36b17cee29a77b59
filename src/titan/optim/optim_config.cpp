#include "titan/optim/optim_config.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "titan/core/error.h"

namespace titan::optim {

namespace {

const std::pair<const char*, DecayType> kDecayTypes[] = {
    {"linear", DecayType::linear}, {"sqrt", DecayType::sqrt}, {"cosine", DecayType::cosine}};

std::vector<std::string> decay_type_names() {
  std::vector<std::string> names;
  for (const auto& [name, type] : kDecayTypes) names.push_back(name);
  return names;
}

}  // namespace

AdamWOptions OptimizerConfig::adamw_options() const {
  return {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
}

LrSchedule LrSchedulerConfig::schedule(int64_t training_steps) const {
  auto it = std::find_if(std::begin(kDecayTypes), std::end(kDecayTypes),
                         [&](const auto& entry) { return decay_type == entry.first; });
  TITAN_CHECK(it != std::end(kDecayTypes), "lr_scheduler.decay_type = ", config::format_value(decay_type),
              ": must be one of ", config::Rule{.choices = decay_type_names()}.describe());
  return {.training_steps = training_steps,
          .warmup_steps = warmup_steps,
          .decay_ratio = decay_ratio,
          .decay_type = it->second,
          .min_lr_factor = min_lr_factor};
}

void declare_keys(config::Keys<OptimizerConfig>& keys) {
  using C = OptimizerConfig;
  keys.add("name", &C::name, config::one_of({"AdamW"}), "optimizer")
      .add("lr", &C::lr, config::non_negative(), "peak learning rate")
      .add("beta1", &C::beta1, {.min = 0, .max = 1, .max_open = true}, "first-moment decay")
      .add("beta2", &C::beta2, {.min = 0, .max = 1, .max_open = true}, "second-moment decay")
      .add("eps", &C::eps, config::non_negative(), "added to the denominator")
      .add("weight_decay", &C::weight_decay, config::non_negative(), "decoupled weight decay");
}

void declare_keys(config::Keys<LrSchedulerConfig>& keys) {
  using C = LrSchedulerConfig;
  keys.add("warmup_steps", &C::warmup_steps, config::non_negative(), "steps of linear warmup")
      .add("decay_ratio", &C::decay_ratio, config::fraction(),
           "unset: decay over all steps after warmup; else hold the peak and decay over this fraction "
           "of the steps at the end (warmup-stable-decay)")
      .add("decay_type", &C::decay_type, config::one_of(decay_type_names()), "shape of the decay")
      .add("min_lr_factor", &C::min_lr_factor, config::fraction(), "the decay ends at this fraction of optimizer.lr");
}

}  // namespace titan::optim
