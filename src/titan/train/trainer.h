#pragma once
// The training loop: batch -> forward -> fused cross-entropy -> backward -> clip -> AdamW ->
// LR step, with gradient accumulation, metrics every log_freq steps and a clean stop on
// SIGINT/SIGTERM after the step in flight.
#include <iosfwd>
#include <memory>
#include <vector>

#include "titan/train/job_config.h"

namespace titan::train {

struct TrainResult {
  std::vector<double> losses;  // per optimizer step (mean over its micro-batches)
  std::vector<double> grad_norms;
  int64_t steps_run = 0;
  bool interrupted = false;  // stopped by a signal before training.steps
};

class Trainer {
 public:
  // Builds data, model, optimizer and logger from `cfg`; every problem with the config or the
  // data is reported here, before the first step.
  explicit Trainer(JobConfig cfg, std::ostream& log);
  ~Trainer();
  TrainResult train();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Installs SIGINT/SIGTERM handlers that ask the running trainer to stop after its current step
// (a second signal exits at once), and restores the previous handlers when destroyed.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  static bool requested();
  static void request();  // as if a signal had arrived (tests)
  static void reset();
};

}  // namespace titan::train
