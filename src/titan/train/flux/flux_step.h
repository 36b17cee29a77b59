#pragma once
// FLUX's training step (rectified flow, rectified_flow.h) as the trainer's StepEngine, in either
// execution mode. Each micro-batch draws its slots of flux_batches.h from the step number alone.
//   eager  per micro-batch x_t, the velocity, the MSE and backward op by op; the gradients
//          reduced as the data-parallel plans say, clipped, and AdamW on the host.
//   graph  the same over all micro-batches, clipping and AdamW captured once as one program
//          (graph_mode/graph_step.h) and replayed with each step's x0, noise, t, T5 and CLIP
//          tensors; the position ids, their RoPE table and the guidance are its fixed inputs;
//          the double and single blocks run as two loops (compile.scan_layers). One device.
#include <cstdint>
#include <memory>
#include <vector>

#include "titan/models/flux/model.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/train/flux/flux_batches.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/workload.h"

namespace titan::train::flux {

// The transformer's velocity at b's x_t = (1 - t) x0 + t noise; `guidance` is read by flavors
// with guidance_in. Under context parallelism (`cp`), b holds this rank's tokens (local_tokens),
// and so does the velocity.
Tensor velocity(models::flux::FluxTransformer& model, const FluxBatch& b, double guidance,
                const parallel::ContextParallel* cp = nullptr);

// The batch a rank computes on: b itself, or under context parallelism (`cp`) its share of b's
// image and text tokens (x0, noise, T5) in the layout of parallel/context_parallel.h, t and CLIP
// being per sample, after telling cp the batch begins. Call once per forward.
FluxBatch local_tokens(const FluxBatch& b, parallel::ContextParallel* cp);

// FLUX's loss as graph mode's step captures it (graph_mode/graph_step.h): a micro-batch is the
// tensors x0, noise, t, T5 and CLIP of a FluxBatch.
class FlowMatchingLoss : public StepLoss {
 public:
  FlowMatchingLoss(models::flux::FluxTransformer& model, double guidance) : model_(model), guidance_(guidance) {}

  static std::vector<Tensor> tensors(const FluxBatch& b) { return {b.x0, b.noise, b.t, b.txt, b.y}; }

  // The latent size of the batches to come (fixed by flux.image_size), read by the capture.
  void set_latent_size(int64_t height, int64_t width) {
    height_ = height;
    width_ = width;
  }

  Terms loss(const std::vector<Tensor>& batch) override;
  nn::Module& module() override { return model_; }
  int64_t num_layers() const override;
  int64_t tokens(const std::vector<Tensor>& batch) const override { return batch[0].size(0) * batch[0].size(1); }

 private:
  models::flux::FluxTransformer& model_;
  double guidance_;
  int64_t height_ = 0, width_ = 0;
};

std::unique_ptr<StepEngine> make_eager_flux_step(const EngineParts& parts,
                                                 models::flux::FluxTransformer& model, FluxBatches& batches,
                                                 int64_t local_batch);
// `mode` is graph mode's (make_graph_step); `local_batch` the rows of every data-parallel device
// this process feeds, which the program splits over them.
std::unique_ptr<StepEngine> make_graph_flux_step(const EngineParts& parts, ExecutionMode& mode,
                                                 models::flux::FluxTransformer& model, FluxBatches& batches,
                                                 int64_t local_batch);

}  // namespace titan::train::flux
