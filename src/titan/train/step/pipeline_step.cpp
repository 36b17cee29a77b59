#include "titan/train/step/pipeline_step.h"

#include "titan/ops/loss.h"
#include "titan/train/step/eager_step.h"

namespace titan::train {

parallel::PipelineStepStats run_pipeline_batch(models::CausalLM& model, const parallel::PipelineParallel& pp,
                                               parallel::PipelineExecutor& executor, const data::Batch& batch,
                                               const LossOfLogits& loss, double grad_scale) {
  const int64_t n = executor.schedule().micro_batches;
  TITAN_CHECK(batch.inputs.size(0) % n == 0, "pipeline parallelism: a batch of ", batch.inputs.size(0),
              " sequences does not split into ", n, " micro-batches");
  const int64_t rows = batch.inputs.size(0) / n;
  auto micro = [&](const Tensor& t, int64_t m) { return t.defined() ? t.narrow(0, m * rows, rows) : Tensor(); };
  return executor.run(
      [&](int64_t m) { return micro(batch.inputs, m); },
      [&](int64_t stage, int64_t m, const Tensor& input) {
        const parallel::StageSpan span = pp.spans()[static_cast<size_t>(stage)];
        parallel::StageResult r;
        const Tensor tokens = micro(batch.inputs, m);
        r.output = model.run_layers(tokens, micro(batch.document_ids, m), stage == 0 ? Tensor() : input, span.first,
                                    span.last);
        r.aux = model.auxiliary_loss();
        if (span.last == model.num_layers()) {
          const Tensor labels = micro(batch.labels, m);
          r.output = loss ? loss(r.output, labels) : ops::cross_entropy(r.output, labels);
        }
        return r;
      },
      grad_scale);
}

namespace {

// The step's forwards and backwards: `batches` batches, each split into the schedule's
// micro-batches (StepParallelism::forward_backward).
MicroBatchSums run_pipeline(models::CausalLM& model, parallel::PipelineParallel& pp,
                            parallel::PipelineExecutor& executor, const LossOfLogits& loss, int64_t batches,
                            const NextBatch& next) {
  const auto n = static_cast<double>(executor.schedule().micro_batches);
  MicroBatchSums sums;
  double compute = 0, wall = 0;
  for (int64_t batch = 0; batch < batches; ++batch) {
    const parallel::PipelineStepStats run =
        run_pipeline_batch(model, pp, executor, next(), loss, 1.0 / (static_cast<double>(batches) * n));
    sums.loss += run.loss_sum / n;
    sums.aux += run.aux_sum / n;
    sums.has_aux = sums.has_aux || run.has_aux;
    compute += run.compute_seconds;
    wall += run.wall_seconds;
  }
  // This rank's share of the schedule spent waiting; the metrics average it over the ranks.
  sums.extra.emplace_back("pp/bubble", wall > 0 ? 1 - compute / wall : 0.0);
  // The last stage's rank holds the losses, each stage's the auxiliary terms of its layers.
  dist::ProcessGroup& group = pp.group();
  sums.loss = group.all_reduce(sums.loss, dist::ReduceOp::sum);
  sums.aux = group.all_reduce(sums.aux, dist::ReduceOp::sum);
  sums.has_aux = group.all_reduce(sums.has_aux ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
  return sums;
}

}  // namespace

std::unique_ptr<StepEngine> make_pipeline_step(const StepParts& parts) {
  parallel::PipelineParallel& pp = *parts.plans.pp;
  const parallel::TensorParallel* tp = parts.plans.tp.get();
  // Between stages: [micro-batch, seq, dim], the sequence split over tp under sequence parallelism.
  const int64_t tp_split = tp && tp->options().sequence_parallel ? parts.mesh.degree(dist::MeshAxis::tp) : 1;
  auto executor = std::make_shared<parallel::PipelineExecutor>(
      pp.schedule(), pp.group(),
      Shape{parts.cfg.parallelism.pipeline_parallel_microbatch_size, parts.cfg.training.seq_len / tp_split,
            parts.model.hidden_size()});
  StepParallelism sync = step_parallelism(parts);
  sync.forward_backward = [&model = parts.model, &pp, executor, loss = sync.loss](int64_t batches,
                                                                                    const NextBatch& next) {
    return run_pipeline(model, pp, *executor, loss, batches, next);
  };
  return make_eager_step(parts, std::move(sync), "eager, pipeline stages: " + parallel::describe_schedule(pp.schedule()));
}

}  // namespace titan::train
