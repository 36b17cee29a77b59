#include "titan/train/step/eager_step.h"

#include "titan/core/trace.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/optim/clip.h"

namespace titan::train {

namespace {

// The forwards and backwards of a step's micro-batches, one after the other.
MicroBatchSums run_micro_batches(models::CausalLM& model, int64_t micro_batches, const NextBatch& next_batch,
                                 const StepParallelism& sync) {
  MicroBatchSums sums;
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    data::Batch batch = next_batch();
    Tensor logits, loss;
    {
      trace::Span span("forward", "phase");
      // document_ids is defined only when the loader makes them (attention.document_masking).
      logits = model(batch.inputs, batch.document_ids);
      loss = sync.loss ? sync.loss(logits, batch.labels) : ops::cross_entropy(logits, batch.labels);
      if (Tensor aux = model.auxiliary_loss(); aux.defined()) {
        sums.has_aux = true;
        sums.aux += aux.item();
        loss = loss + aux;
      }
      sums.loss += loss.item();
    }
    if (sync.before_backward) sync.before_backward(micro == micro_batches - 1);
    trace::Span span("backward", "phase");
    (micro_batches == 1 ? loss : ops::scale(loss, 1.0 / static_cast<double>(micro_batches))).backward();
  }
  return sums;
}

class EagerStep : public StepEngine {
 public:
  EagerStep(const StepParts& parts, StepParallelism sync, std::string description)
      : model_(parts.model),
        optimizer_(parts.optimizer),
        max_norm_(parts.cfg.training.max_norm),
        sync_(std::move(sync)),
        description_(std::move(description)) {
    for (const auto& [name, p] : parts.named_params) params_.push_back(p);
  }
  StepStats step(int64_t micro_batches, const NextBatch& next_batch) override {
    return train_step(model_, optimizer_, params_, max_norm_, micro_batches, next_batch, sync_);
  }
  std::string describe() const override { return description_; }

 private:
  models::CausalLM& model_;
  optim::AdamW& optimizer_;
  std::vector<Tensor> params_;
  double max_norm_;
  StepParallelism sync_;
  std::string description_;
};

}  // namespace

StepParallelism step_parallelism(const StepParts& parts) {
  return step_parallelism(parts.plans, parts.named_params, parts.ddp);
}

StepParallelism step_parallelism(models::Parallelized& plans,
                                 const std::vector<std::pair<std::string, Tensor>>& named,
                                 parallel::DataParallel* ddp) {
  StepParallelism sync;
  if (ddp)
    sync = {.before_backward = [ddp](bool last) { ddp->set_gradient_sync(last); },
            .reduce = [ddp] { ddp->average_gradients(); }};
  if (parallel::FullyShard* fsdp = plans.fsdp.get())
    sync = {.before_backward = [fsdp](bool last) { fsdp->set_gradient_sync(last); },
            .reduce = [fsdp] { fsdp->reduce_gradients(); },
            .sum_norm_partials = [fsdp](double partial) { return fsdp->sum_over_shards(partial); }};
  std::vector<Tensor> params;
  for (const auto& [name, p] : named) params.push_back(p);
  if (parallel::ContextParallel* cp = plans.cp.get()) {
    // Each cp rank's gradients come from its own tokens: averaged over cp after dp's reduction.
    sync.reduce = [cp, params, dp_reduce = sync.reduce] {
      if (dp_reduce) dp_reduce();
      cp->average_gradients(params);
    };
  }
  if (parallel::TensorParallel* tp = plans.tp.get()) {
    // Data parallelism first (its reductions average over dp), then the tp sums.
    sync.reduce = [tp, &named, dp_reduce = sync.reduce] {
      if (dp_reduce) dp_reduce();
      tp->reduce_partial_gradients(named);
    };
    sync.sum_norm_partials = [tp, dp_sum = sync.sum_norm_partials](double partial) {
      return tp->group().all_reduce(dp_sum ? dp_sum(partial) : partial, dist::ReduceOp::sum);
    };
    sync.norm_params = tp->norm_params(named);
    sync.loss = [tp](const Tensor& logits, const Tensor& labels) { return tp->loss(logits, labels); };
  }
  if (parallel::ExpertParallel* ep = plans.ep.get()) {
    // After FSDP's reduction (the experts' over efsdp, the rest over all of dp_shard, ep's ranks
    // included): the experts' gradients scaled by 1/ep. Their shards and the others' are disjoint
    // over dp_shard, so FSDP's sum of the norm's partials counts each element once.
    sync.reduce = [ep, &named, dp_reduce = sync.reduce] {
      if (dp_reduce) dp_reduce();
      ep->scale_expert_gradients(named);
    };
  }
  if (parallel::PipelineParallel* pp = plans.pp.get()) {
    // Each rank holds its stages' parameters: their norms add up over pp.
    sync.sum_norm_partials = [pp, inner = sync.sum_norm_partials](double partial) {
      return pp->group().all_reduce(inner ? inner(partial) : partial, dist::ReduceOp::sum);
    };
  }
  return sync;
}

double apply_gradients(optim::AdamW& optimizer, const std::vector<Tensor>& params, double max_norm,
                       const StepParallelism& sync) {
  {
    trace::Span span("gradient reduce", "phase");
    if (sync.reduce) sync.reduce();
  }
  trace::Span span("optimizer", "phase");
  // Replicated parameters: after reduce_gradients every rank holds the same whole gradients, so
  // this rank's norm is the global one. Sharded ones: the ranks' partial sums make it up.
  double partial = optim::grad_norm_partial(sync.norm_params.empty() ? params : sync.norm_params, 2.0);
  if (sync.sum_norm_partials) partial = sync.sum_norm_partials(partial);
  const double norm = optim::grad_norm_from_partial(partial, 2.0);
  // Clipped inside the update: the gradients stay as backward left them.
  optimizer.step(optim::clip_coefficient(max_norm, norm));
  return norm;
}

StepStats train_step(models::CausalLM& model, optim::AdamW& optimizer, const std::vector<Tensor>& params,
                     double max_norm, int64_t micro_batches, const NextBatch& next_batch,
                     const StepParallelism& sync) {
  optimizer.zero_grad();
  MicroBatchSums sums;
  if (sync.forward_backward) {
    if (sync.before_backward) sync.before_backward(false);
    sums = sync.forward_backward(micro_batches, next_batch);
  } else {
    sums = run_micro_batches(model, micro_batches, next_batch, sync);
  }
  StepStats stats;
  stats.grad_norm = apply_gradients(optimizer, params, max_norm, sync);
  stats.loss = sums.loss / static_cast<double>(micro_batches);
  if (sums.has_aux) stats.extra.emplace_back("aux_loss", sums.aux / static_cast<double>(micro_batches));
  for (auto& scalar : sums.extra) stats.extra.push_back(std::move(scalar));
  for (auto& scalar : model.end_step()) stats.extra.push_back(std::move(scalar));
  return stats;
}

std::unique_ptr<StepEngine> make_eager_step(const StepParts& parts, StepParallelism sync, std::string description) {
  return std::make_unique<EagerStep>(parts, std::move(sync), std::move(description));
}

}  // namespace titan::train
