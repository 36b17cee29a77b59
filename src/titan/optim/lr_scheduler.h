#pragma once
// Learning-rate schedules, shaped like TorchTitan's [lr_scheduler] config: a linear warmup, an
// optional stable phase, then a decay to min_lr_factor * lr.
#include <cstdint>
#include <optional>

namespace titan::optim {

class AdamW;

enum class DecayType { linear, cosine, sqrt, constant };

struct LrSchedule {
  int64_t training_steps = 1;
  int64_t warmup_steps = 0;
  // The decay covers the last round(decay_ratio * training_steps) steps (half to even), after a flat phase at
  // the peak: warmup-stable-decay (WSD). Unset: the decay starts right after warmup.
  std::optional<double> decay_ratio = std::nullopt;
  DecayType decay_type = DecayType::cosine;
  double min_lr_factor = 0.0;  // the decay ends at this fraction of the peak lr

  // Throws, naming the field, on values that describe no schedule.
  void validate() const;
};

// The multiplier of the peak lr for 0-based optimizer step `step` — a pure function, the lambda
// of torch.optim.lr_scheduler.LambdaLR. With W warmup steps and D decay steps of T:
//   step < W:           (step + 1) / (W + 1)   rises from ~0, never 0, reaching the peak at W
//   step < T - D:       1
//   otherwise:          min + (1 - min) * shape(p),  p = min(1, (step - (T - D)) / D)
// where shape is 1 - p (linear), (1 + cos(pi p)) / 2 (cosine), 1 - sqrt(p) (sqrt) or 1
// (constant). The first decay step is at the peak; p reaches 1 one step past the last.
double lr_factor(const LrSchedule& s, int64_t step);

// Sets an optimizer's lr from a schedule, as LambdaLR does: on construction for step 0, then
// for the next step on each step() (call it after the optimizer's step).
class LrScheduler {
 public:
  // The optimizer's lr at construction is the peak.
  LrScheduler(AdamW& optimizer, LrSchedule schedule);

  void step();
  // The lr the optimizer will use for step `step` (0-based).
  double lr_at(int64_t step) const { return peak_lr_ * lr_factor(schedule_, step); }
  double lr() const { return lr_at(step_); }
  // Steps taken so far; a checkpoint saves it and set_step restores it.
  int64_t current_step() const { return step_; }
  void set_step(int64_t step);
  const LrSchedule& schedule() const { return schedule_; }

 private:
  AdamW& optimizer_;
  LrSchedule schedule_;
  double peak_lr_;
  int64_t step_ = 0;
};

}  // namespace titan::optim
