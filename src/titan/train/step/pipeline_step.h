#pragma once
// Pipeline parallelism's step: the eager step (step/eager_step.h) whose forwards and backwards run
// this rank's stages by the schedule. One batch through a pipeline: split into the schedule's micro-batches, each stage's forward the
// model's layers of that stage (CausalLM::run_layers) and, on the last, the loss of its logits.
// What the trainer runs per batch under pipeline parallelism, and what bench_pipeline times.
#include <functional>

#include "titan/data/loader.h"
#include "titan/models/causal_lm.h"
#include "titan/parallel/pipeline_executor.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/train/step/step_engine.h"

namespace titan::train {

// The loss of a micro-batch's logits and labels (tensor parallelism's over a split vocabulary);
// unset: ops::cross_entropy.
using LossOfLogits = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;

// Runs `batch` (split along its first dim into the schedule's micro-batches) through this rank's
// stages of `model`, seeding every loss with `grad_scale`. Collective over pp's group.
parallel::PipelineStepStats run_pipeline_batch(models::CausalLM& model, const parallel::PipelineParallel& pp,
                                               parallel::PipelineExecutor& executor, const data::Batch& batch,
                                               const LossOfLogits& loss, double grad_scale);

// The engine for parts.plans.pp's stages: each batch of the step run through the schedule, the
// losses summed on the last stage and shared over pp, and "pp/bubble" (this rank's share of the
// schedule spent waiting) among the step's figures.
std::unique_ptr<StepEngine> make_pipeline_step(const StepParts& parts);

}  // namespace titan::train
