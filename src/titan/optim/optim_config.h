#pragma once
// The [optimizer] and [lr_scheduler] sections.
#include <cstdint>
#include <optional>
#include <string>

#include "titan/core/config_schema.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_scheduler.h"

namespace titan::optim {

struct OptimizerConfig {
  std::string name = "AdamW";
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;

  AdamWOptions adamw_options() const;
};

struct LrSchedulerConfig {
  int64_t warmup_steps = 200;
  // Unset: decay over every step after warmup. Set: stay at the peak, then decay over the last
  // decay_ratio of the steps (warmup-stable-decay).
  std::optional<double> decay_ratio = std::nullopt;
  std::string decay_type = "linear";
  double min_lr_factor = 0.0;

  // The schedule over `training_steps` (training.steps).
  LrSchedule schedule(int64_t training_steps) const;
};

void declare_keys(config::Keys<OptimizerConfig>& keys);
void declare_keys(config::Keys<LrSchedulerConfig>& keys);

}  // namespace titan::optim
