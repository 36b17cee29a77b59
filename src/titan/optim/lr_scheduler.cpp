#include "titan/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/error.h"
#include "titan/optim/adamw.h"

namespace titan::optim {

namespace {
int64_t decay_steps(const LrSchedule& s) {
  if (!s.decay_ratio) return s.training_steps - s.warmup_steps;
  // Ties to even, as Python's round() in TorchTitan, so a config gives the same split in both.
  return static_cast<int64_t>(std::nearbyint(*s.decay_ratio * static_cast<double>(s.training_steps)));
}
}  // namespace

void LrSchedule::validate() const {
  TITAN_CHECK(training_steps >= 1, "lr schedule: training_steps must be at least 1, got ", training_steps);
  TITAN_CHECK(warmup_steps >= 0 && warmup_steps <= training_steps,
              "lr schedule: warmup_steps must lie in [0, ", "training_steps = ", training_steps, "], got ",
              warmup_steps);
  TITAN_CHECK(!decay_ratio || (*decay_ratio >= 0 && *decay_ratio <= 1),
              "lr schedule: decay_ratio must lie in ", "[0, 1], got ", decay_ratio.value_or(0));
  TITAN_CHECK(min_lr_factor >= 0 && min_lr_factor <= 1, "lr schedule: min_lr_factor must lie in [0, 1], got ",
              min_lr_factor);
  TITAN_CHECK(warmup_steps + decay_steps(*this) <= training_steps, "lr schedule: ", warmup_steps,
              " warmup steps and ", decay_steps(*this), " decay steps (decay_ratio ", decay_ratio.value_or(0),
              " of ", training_steps, ") overlap; lower warmup_steps or decay_ratio");
}

double lr_factor(const LrSchedule& s, int64_t step) {
  s.validate();
  TITAN_CHECK(step >= 0, "lr schedule: step must be non-negative, got ", step);
  if (step < s.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps + 1);
  int64_t decay = decay_steps(s), decay_start = s.training_steps - decay;
  if (step < decay_start || decay == 0) return 1.0;
  double p = std::min(1.0, static_cast<double>(step - decay_start) / static_cast<double>(decay));
  double shape = 0;
  switch (s.decay_type) {
    case DecayType::linear: shape = 1.0 - p; break;
    case DecayType::cosine: shape = 0.5 * (1.0 + std::cos(std::numbers::pi * p)); break;
    case DecayType::sqrt: shape = 1.0 - std::sqrt(p); break;
    case DecayType::constant: shape = 1.0; break;
  }
  return s.min_lr_factor + (1.0 - s.min_lr_factor) * shape;
}

LrScheduler::LrScheduler(AdamW& optimizer, LrSchedule schedule)
    : optimizer_(optimizer), schedule_(schedule), peak_lr_(optimizer.lr()) {
  schedule_.validate();
  optimizer_.set_lr(lr());
}

void LrScheduler::step() {
  set_step(step_ + 1);
}

void LrScheduler::set_step(int64_t step) {
  TITAN_CHECK(step >= 0, "LrScheduler::set_step: step must be non-negative, got ", step);
  step_ = step;
  optimizer_.set_lr(lr());
}

}  // namespace titan::optim
