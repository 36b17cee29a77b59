#include "titan/train/pipeline_step.h"

#include "titan/ops/loss.h"

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

}  // namespace titan::train
