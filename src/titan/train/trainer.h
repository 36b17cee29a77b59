#pragma once
// The training loop: per step, the step engine's optimizer step over the micro-batches of gradient
// accumulation (step/step_engine.h: eager, pipeline or graph; the loop does not know which), the
// LR step, metrics every log_freq steps, validation every validation.freq steps (validator.h),
// checkpoints (resume, save every interval and at the end) and a clean stop on SIGINT/SIGTERM
// after the step in flight (stop_on_signal.h), saving a checkpoint there.
#include <iosfwd>
#include <memory>
#include <vector>

#include "titan/dist/process_group.h"
#include "titan/train/config/job_config.h"
#include "titan/train/memory_plan.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/step/step_engine.h"
#include "titan/train/stop_on_signal.h"

namespace titan::train {

struct TrainResult {
  // Per optimizer step run by this call: the mean over its micro-batches and the data-parallel
  // ranks, the same on every rank.
  std::vector<double> losses;
  std::vector<double> grad_norms;
  // Each validation pass of this call (validation.enable); its loss and tokens are the same on
  // every rank, its time this rank's.
  std::vector<ValidationMetrics> validations;
  int64_t steps_run = 0;     // the step training reached, counting those before a resume
  int64_t resumed_from = 0;  // the checkpoint step this run continued after; 0: a fresh start
  bool interrupted = false;  // stopped by a signal before training.steps
};

// What a dry run found: one rank of a job laid out as its config says, built without the other
// ranks.
struct DryRunReport {
  int world_size = 1;
  int rank = 0;
  MemoryPlan plan;  // computed on meta
  // With DryRunOptions::initialise: the allocator's high-water mark while this rank's shards were
  // initialised and its optimizer state made; 0 otherwise.
  int64_t startup_peak_bytes = 0;
};

struct DryRunOptions {
  // Also initialise this rank's shards and make its optimizer (allocating them), measuring what
  // start-up really holds; a small model's test, not the command's.
  bool initialise = false;
};

// Builds rank `rank` of a job of `world_size` ranks as `cfg` lays it out: the device mesh, the
// model on meta and its parallel plans, without launching the other ranks (their process groups
// are simulated) and without data, and prints its memory plan (memory_plan.h) to `log`, checked
// against this machine's memory as a training run's is (training.memory_check). Nothing
// proportional to the model is allocated, so it shows what a rank of a layout this machine could
// never launch needs (405B over thousands of ranks).
DryRunReport dry_run(const JobConfig& cfg, int world_size, int rank, std::ostream& log,
                     DryRunOptions options = {});

// Prints the table of the pipeline schedule [parallelism] asks for (one row per pp rank, one
// column per time slot; F forward, B backward, I input gradients, W weight gradients), with its
// bubble and the activations each rank holds. Needs no ranks and no model.
void print_pipeline_schedule(const JobConfig& cfg, std::ostream& out);

class Trainer {
 public:
  // Builds the device mesh over `world`, then data, model, optimizer and logger from `cfg` and,
  // with checkpointing enabled, restores them from a checkpoint; every problem with the config,
  // the parallel layout, the data or the checkpoint is reported here, before the first step.
  // Collective: every rank of `world` constructs its Trainer and calls train(). Only world rank 0
  // writes to `log`, metrics files and checkpoints; other ranks print warnings to stderr,
  // prefixed with their rank.
  // `objective_engine` makes the step of an objective that lives above train/ (training.objective
  // = "grpo": rl::objective_engine), which is required for it and refused for any other.
  Trainer(JobConfig cfg, std::ostream& log, dist::ProcessGroup world = dist::world(),
          MakeEngine objective_engine = nullptr);
  ~Trainer();
  TrainResult train();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace titan::train
