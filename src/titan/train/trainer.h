#pragma once
// The training loop: batch -> forward -> fused cross-entropy (+ the model's auxiliary loss) ->
// backward -> clip -> AdamW -> LR step, with gradient accumulation, metrics every log_freq
// steps, validation every validation.freq steps (validator.h), checkpoints (resume, save every
// interval and at the end) and a clean stop on SIGINT/SIGTERM after the step in flight, saving a
// checkpoint there.
#include <functional>
#include <iosfwd>
#include <memory>
#include <vector>

#include "titan/data/loader.h"
#include "titan/dist/process_group.h"
#include "titan/models/causal_lm.h"
#include "titan/optim/adamw.h"
#include "titan/train/config/job_config.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/metrics/tensorboard.h"

namespace titan::train {

struct StepStats {
  double loss = 0;       // mean over the micro-batches, the model's auxiliary loss included
  double grad_norm = 0;  // before clipping
  // The model's figures (CausalLM::end_step), after "aux_loss" (its mean) when it has one.
  Scalars extra;
};

// What a step's forwards added up, over its micro-batches.
struct MicroBatchSums {
  double loss = 0;  // the losses, auxiliary losses included
  double aux = 0;   // the auxiliary losses alone
  bool has_aux = false;
  Scalars extra = {};  // figures of how they ran (a pipeline's bubble), for the metrics
};

// How parallelism joins a step; what is left empty is skipped (one process).
struct GradientSync {
  // Before each micro-batch's backward, whether it is the step's last: only that one reduces
  // gradients over the ranks, the others accumulate locally.
  std::function<void(bool last)> before_backward = nullptr;
  // After the last backward: finishes averaging the gradients over the ranks.
  std::function<void()> reduce = nullptr;
  // This rank's sum of squares of its gradients -> the sum over the ranks that hold the other
  // shards of them (sharded parameters); unset, this rank's norm is the global one.
  std::function<double(double)> sum_norm_partials = nullptr;
  // The tensors whose gradients make up this rank's share of that sum (tensor parallelism counts
  // a replicated parameter on one rank of its group); unset: all of `params`.
  std::vector<Tensor> norm_params = {};
  // The loss of the model's logits (tensor parallelism's cross-entropy over a split
  // vocabulary); unset: ops::cross_entropy.
  std::function<Tensor(const Tensor& logits, const Tensor& labels)> loss = nullptr;
  // Runs the step's forwards and backwards in place of the loop over `micro_batches` batches from
  // `next_batch` (a pipeline's schedule), each backward of the loss over micro_batches; returns the
  // step's sums, the same on every rank. Its backwards only accumulate: `reduce` reduces them all.
  std::function<MicroBatchSums(int64_t micro_batches, const std::function<data::Batch()>& next_batch)>
      forward_backward = nullptr;
};

// One optimizer step as train() takes each: gradients dropped; per micro-batch forward ->
// cross-entropy plus the model's auxiliary loss -> backward (of the loss over `micro_batches`);
// the gradient reduction of `sync`; clipping to max_norm over the global norm, inside the AdamW
// step (the gradients are left unclipped); the model's end of step. The loss is this rank's. The
// learning-rate schedule is the caller's. Public so that benchmarks time this very step.
StepStats train_step(models::CausalLM& model, optim::AdamW& optimizer, const std::vector<Tensor>& params,
                     double max_norm, int64_t micro_batches, const std::function<data::Batch()>& next_batch,
                     const GradientSync& sync = {});

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

// What a dry run measured: one rank of a job laid out as its config says, built without the
// other ranks.
struct DryRunReport {
  int world_size = 1;
  int rank = 0;
  int64_t peak_bytes = 0;      // the allocator's high-water mark while building and initialising
  int64_t param_bytes = 0;     // this rank's parameters (its shards and slices)
  int64_t training_bytes = 0;  // what training keeps per rank: parameters, gradients, AdamW's moments
};

// Builds rank `rank` of a job of `world_size` ranks as `cfg` lays it out: the device mesh, the
// model on meta, its parallel plans, this rank's initialised shards and its optimizer state,
// without launching the other ranks (their process groups are simulated) and without data. Nothing
// larger than this rank's part is allocated, so it shows what start-up costs a rank of a layout
// this machine could never launch (405B over thousands of ranks). Logs the figures to `log`.
DryRunReport dry_run(const JobConfig& cfg, int world_size, int rank, std::ostream& log);

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
  Trainer(JobConfig cfg, std::ostream& log, dist::ProcessGroup world = dist::world());
  ~Trainer();
  TrainResult train();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Installs SIGINT/SIGTERM handlers that ask the running trainer to stop after its current step
// (a second signal exits at once), and restores the default handlers when destroyed, forgetting
// a stop it was asked for (so that a later run in the same process starts unstopped).
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  static bool requested();
  static void request();  // as if a signal had arrived (tests)
  static void reset();
};

}  // namespace titan::train
