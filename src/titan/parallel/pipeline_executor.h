#pragma once
// Runs one step's micro-batches through this rank's pipeline stages in the order its row of the
// schedule's table gives (pipeline_schedule.h), moving activations forward and their gradients
// back over the pp group with non-blocking send and receive: the receives a coming step needs
// are posted a few steps ahead and sends complete in the background, so transfers overlap the
// stages' compute. Stages on the same rank (the V placement) hand tensors over directly.
//
// A backward_input step computes the gradients the stage before waits for and holds back the
// parameters' gradients (autograd::backward_split); its backward_weight step computes them
// later, where the table put it to fill a bubble.
#include <cstdint>
#include <functional>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::parallel {

// What a stage's forward returns for one micro-batch.
struct StageResult {
  // Activations for the next stage; on the last stage the micro-batch's loss (0-d).
  Tensor output = {};
  // A 0-d term of the objective computed inside the stage (MoE load balancing), or undefined.
  Tensor aux = {};
};
// Runs stage `stage` on micro-batch `micro`: `input` holds its token ids on the first stage, else
// the activations the stage before sent (a leaf that requires grad).
using StageForward = std::function<StageResult(int64_t stage, int64_t micro, const Tensor& input)>;

struct PipelineStepStats {
  // Over this rank's micro-batches: its last stage's losses plus its stages' auxiliary terms, and
  // those terms alone. Summed over the pp ranks, they are the step's.
  double loss_sum = 0;
  double aux_sum = 0;
  bool has_aux = false;
  double compute_seconds = 0;  // in this rank's forwards and backwards
  double wall_seconds = 0;     // of the whole table
  double bytes_sent = 0;       // activations and gradients sent to other ranks
};

class PipelineExecutor {
 public:
  // `activation_shape` and `dtype`: what one stage hands the next for one micro-batch (and the
  // gradient that comes back), checked at every send.
  PipelineExecutor(PipelineSchedule schedule, dist::ProcessGroup group, Shape activation_shape, DType dtype = kF32);

  // Runs this rank's row of the table once. Micro-batch m's first stage takes first_input(m);
  // every loss and auxiliary term is seeded with gradient `grad_scale` (one over the number of
  // micro-batches the step averages). Every rank of the group must call it.
  PipelineStepStats run(const std::function<Tensor(int64_t micro)>& first_input, const StageForward& forward,
                        double grad_scale);

  const PipelineSchedule& schedule() const { return schedule_; }

 private:
  PipelineSchedule schedule_;
  dist::ProcessGroup group_;
  Shape activation_shape_;
  DType dtype_;
};

}  // namespace titan::parallel
