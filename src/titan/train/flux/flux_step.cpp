#include "titan/train/flux/flux_step.h"

#include <string>
#include <utility>
#include <vector>

#include "titan/core/trace.h"
#include "titan/ops/arith.h"
#include "titan/train/flux/rectified_flow.h"
#include "titan/train/graph_mode/graph_engine.h"
#include "titan/train/step/eager_step.h"

namespace titan::train::flux {

namespace {

using models::flux::FluxModelArgs;
using models::flux::FluxTransformer;

// Micro-batch m of step `step` (1-based) of `micro_batches`: this data-parallel rank's rows of
// the global slots (flux_batches.h).
FluxBatch draw(FluxBatches& batches, int64_t step, int64_t m, int64_t micro_batches, int64_t dp_rank,
               int64_t dp_world, int64_t local_batch) {
  const int64_t first_slot =
      ((step - 1) * micro_batches + m) * dp_world * local_batch + dp_rank * local_batch;
  return batches.training(first_slot, local_batch);
}

class EagerFluxStep : public StepEngine {
 public:
  EagerFluxStep(const EngineParts& p, FluxTransformer& model, FluxBatches& batches, int64_t local_batch)
      : model_(model),
        batches_(batches),
        optimizer_(p.optimizer),
        max_norm_(p.cfg.training.max_norm),
        guidance_(p.cfg.flux.guidance),
        local_batch_(local_batch),
        dp_rank_(p.mesh[dist::MeshAxis::dp].rank()),
        dp_world_(p.mesh[dist::MeshAxis::dp].size()),
        step_(p.start_step),
        cp_(p.plans.cp.get()),
        sync_(step_parallelism(p.plans, p.named_params, p.ddp)) {
    for (const auto& [name, t] : p.named_params) params_.push_back(t);
  }

  StepStats step(int64_t micro_batches, const NextBatch&) override {
    ++step_;
    optimizer_.zero_grad();
    double loss_sum = 0;
    for (int64_t m = 0; m < micro_batches; ++m) {
      Tensor loss;
      {
        trace::Span span("forward", "phase");
        // Every cp rank draws the same rows (they share a dp coordinate) and keeps its tokens.
        const FluxBatch b =
            local_tokens(draw(batches_, step_, m, micro_batches, dp_rank_, dp_world_, local_batch_), cp_);
        loss = flow_matching_loss(velocity(model_, b, guidance_, cp_), b.x0, b.noise);
        loss_sum += loss.item();
      }
      if (sync_.before_backward) sync_.before_backward(m == micro_batches - 1);
      trace::Span span("backward", "phase");
      (micro_batches == 1 ? loss : ops::scale(loss, 1.0 / static_cast<double>(micro_batches))).backward();
    }
    StepStats stats;
    stats.grad_norm = apply_gradients(optimizer_, params_, max_norm_, sync_);
    stats.loss = loss_sum / static_cast<double>(micro_batches);
    return stats;
  }

  std::string describe() const override {
    return "eager flow matching: per micro-batch x_t = (1 - t) x0 + t noise, velocity MSE, backward; "
           "gradients reduced, clipped, AdamW";
  }

 private:
  FluxTransformer& model_;
  FluxBatches& batches_;
  optim::AdamW& optimizer_;
  double max_norm_, guidance_;
  int64_t local_batch_, dp_rank_, dp_world_, step_;
  parallel::ContextParallel* cp_;
  StepParallelism sync_;
  std::vector<Tensor> params_;
};

class GraphFluxStep : public StepEngine {
 public:
  GraphFluxStep(const EngineParts& p, ExecutionMode& mode, FluxTransformer& model, FluxBatches& batches,
                int64_t local_batch)
      : batches_(batches), local_batch_(local_batch), step_(p.start_step) {
    auto loss = std::make_unique<FlowMatchingLoss>(model, p.cfg.flux.guidance);
    loss_ = loss.get();
    graph_ = make_graph_step(mode, std::move(loss), p.cfg, p.optimizer, p.named_params,
                             {"double_blocks", "single_blocks"}, p.world, p.log);
  }

  StepStats step(int64_t micro_batches, const NextBatch&) override {
    ++step_;
    std::vector<std::vector<Tensor>> tensors;
    for (int64_t m = 0; m < micro_batches; ++m) {
      const FluxBatch b = draw(batches_, step_, m, micro_batches, 0, 1, local_batch_);
      loss_->set_latent_size(b.height, b.width);
      tensors.push_back(FlowMatchingLoss::tensors(b));
    }
    const GraphStep::Result r = graph_->run(tensors);
    return {.loss = r.loss, .grad_norm = r.grad_norm, .extra = {}};
  }

  void to_host() override { graph_->to_host(); }
  std::string describe() const override {
    return "graph flow matching: x_t, velocity MSE, backward, clipping and AdamW as one program, " +
           graph_->runner().describe();
  }
  std::optional<int64_t> device_peak_bytes() const override { return graph_peak_bytes(*graph_); }

 private:
  FluxBatches& batches_;
  int64_t local_batch_, step_;
  FlowMatchingLoss* loss_;  // graph_'s
  std::unique_ptr<GraphStep> graph_;
};

}  // namespace

FlowMatchingLoss::Terms FlowMatchingLoss::loss(const std::vector<Tensor>& batch) {
  const FluxBatch b{.x0 = batch[0],
                    .noise = batch[1],
                    .t = batch[2],
                    .txt = batch[3],
                    .y = batch[4],
                    .height = height_,
                    .width = width_};
  return {.loss = flow_matching_loss(velocity(model_, b, guidance_), b.x0, b.noise), .aux = Tensor()};
}

int64_t FlowMatchingLoss::num_layers() const {
  return model_.args().depth + model_.args().depth_single_blocks;
}

FluxBatch local_tokens(const FluxBatch& b, parallel::ContextParallel* cp) {
  if (!cp) return b;
  cp->begin_batch(b.x0.size(0), Tensor());
  FluxBatch local = b;
  local.x0 = cp->shard(b.x0, 1);
  local.noise = cp->shard(b.noise, 1);
  local.txt = cp->shard(b.txt, 1);
  return local;
}

Tensor velocity(FluxTransformer& model, const FluxBatch& b, double guidance, const parallel::ContextParallel* cp) {
  const FluxModelArgs& a = model.args();
  const Tensor img_ids = models::flux::image_ids(b.height, b.width, a.patch_size);
  // Text ids are all zero, so the local text tokens' are text_ids of their count.
  models::flux::FluxInputs in{.img = noisy_latents(b.x0, b.noise, b.t),
                              .img_ids = cp ? cp->shard(img_ids, 0) : img_ids,
                              .txt = b.txt,
                              .txt_ids = models::flux::text_ids(b.txt.size(1)),
                              .timesteps = b.t,
                              .y = b.y,
                              .guidance = Tensor()};
  if (a.guidance_embed)
    in.guidance = Tensor::from_vector(
        std::vector<float>(static_cast<size_t>(b.t.size(0)), static_cast<float>(guidance)), {b.t.size(0)});
  return model(in);
}

std::unique_ptr<StepEngine> make_eager_flux_step(const EngineParts& parts, FluxTransformer& model,
                                                 FluxBatches& batches, int64_t local_batch) {
  return std::make_unique<EagerFluxStep>(parts, model, batches, local_batch);
}

std::unique_ptr<StepEngine> make_graph_flux_step(const EngineParts& parts, ExecutionMode& mode,
                                                 FluxTransformer& model, FluxBatches& batches,
                                                 int64_t local_batch) {
  return std::make_unique<GraphFluxStep>(parts, mode, model, batches, local_batch);
}

}  // namespace titan::train::flux
