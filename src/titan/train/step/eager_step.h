#pragma once
// Eager mode's step: op by op on the host, each micro-batch's forward, cross-entropy (plus the
// model's auxiliary loss) and backward, then the gradients synchronised as the parallel plans say,
// clipping over the global norm inside the AdamW update, and the model's end of step. The
// synchronisation is built once, when the engine is made.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/train/step/step_engine.h"

namespace titan::train {

// What a step's forwards added up, over its micro-batches.
struct MicroBatchSums {
  double loss = 0;  // the losses, auxiliary losses included
  double aux = 0;   // the auxiliary losses alone
  bool has_aux = false;
  Scalars extra = {};  // figures of how they ran (a pipeline's bubble), for the metrics
};

// How parallelism joins a step: the gradients' synchronisation, the global norm's sum, the loss of
// the logits and, under pipeline parallelism, the forwards and backwards themselves. What is left
// empty is skipped (one process).
struct StepParallelism {
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
  std::function<MicroBatchSums(int64_t micro_batches, const NextBatch& next_batch)> forward_backward = nullptr;
};

// The synchronisation the plans of `parts` need, in their order: data parallelism (DDP, or FSDP's
// reduce-scatter), then context, tensor and expert parallelism's reductions; pipeline stages add
// their norms over pp.
StepParallelism step_parallelism(const StepParts& parts);
// The same from the plans, the parameters the optimizer steps and DDP (null without), for a step
// that is not a language model's (train/flux/).
StepParallelism step_parallelism(models::Parallelized& plans, const std::vector<std::pair<std::string, Tensor>>& named,
                                 parallel::DataParallel* ddp);

// The end of an optimizer step once backward has run: the gradient reduction of `sync`; clipping to
// max_norm over the global norm, inside the AdamW step (the gradients are left unclipped). Returns
// the global norm before clipping.
double apply_gradients(optim::AdamW& optimizer, const std::vector<Tensor>& params, double max_norm,
                       const StepParallelism& sync);

// One optimizer step as the eager engine takes each: gradients dropped; per micro-batch forward ->
// cross-entropy plus the model's auxiliary loss -> backward (of the loss over `micro_batches`);
// the gradient reduction of `sync`; clipping to max_norm over the global norm, inside the AdamW
// step (the gradients are left unclipped); the model's end of step. Public so that benchmarks
// time this very step.
StepStats train_step(models::CausalLM& model, optim::AdamW& optimizer, const std::vector<Tensor>& params,
                     double max_norm, int64_t micro_batches, const NextBatch& next_batch,
                     const StepParallelism& sync = {});

// The engine that runs train_step with `sync`; `description` is its start-up log line.
std::unique_ptr<StepEngine> make_eager_step(const StepParts& parts, StepParallelism sync, std::string description);

}  // namespace titan::train
