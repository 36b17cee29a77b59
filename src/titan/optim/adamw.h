#pragma once
// AdamW (Loshchilov & Hutter) with decoupled weight decay, as torch.optim.AdamW: one fused kernel
// pass per parameter (kernels/cpu/adamw.h).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"
#include "titan/kernels/cpu/adamw.h"

namespace titan::optim {

// Defaults are torch.optim.AdamW's. TorchTitan's Llama recipes use lr 8e-4, betas (0.9, 0.95),
// weight_decay 0.1; the job config sets those.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  // Parameters for which this returns true get no weight decay (a common rule for norms and
  // biases: `p.dim() < 2`). Unset, every parameter decays, as in TorchTitan.
  std::function<bool(const std::string& name, const Tensor& param)> no_decay = nullptr;
};

class AdamW {
 public:
  // Per parameter: the moments (same shape and dtype as the parameter, zeros until its first
  // step) and how many steps it has taken, for bias correction. A parameter that had no gradient
  // at a step did not take it, as in PyTorch.
  struct ParamState {
    Tensor exp_avg;
    Tensor exp_avg_sq;
    int64_t step = 0;
  };

  // `params` as Module::named_parameters() lists them: contiguous f32 or f64 leaves on the CPU,
  // unique names and tensors. The moments are allocated here, so memory use is known up front.
  explicit AdamW(const std::vector<std::pair<std::string, Tensor>>& params, AdamWOptions opts = {});
  // The bytes of the moments the constructor would allocate for `params` (meta tensors count
  // their shapes): what a memory plan counts before any of them exists.
  static int64_t state_bytes(const std::vector<std::pair<std::string, Tensor>>& params);

  // Updates every parameter that has a gradient; the others are left alone. Each gradient is
  // read multiplied by grad_scale (optim::clip_coefficient, to clip without rewriting the
  // gradients first); the gradients themselves are left as they are.
  void step(double grad_scale = 1.0);
  // Drops every parameter's gradient (set to none).
  void zero_grad();

  double lr() const { return opts_.lr; }
  void set_lr(double lr);
  const AdamWOptions& options() const { return opts_; }

  const ParamState& state(const std::string& name) const;
  // Whether `name` takes weight decay (AdamWOptions::no_decay).
  bool decays(const std::string& name) const { return entry(name).decay; }
  // The scalars of `name`'s update at 1-based step `step`, as the fused kernel computes them.
  kernels::cpu::AdamWScalars step_scalars(const std::string& name, int64_t step) const;
  // For checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq" (the moments, aliased) and
  // "<param>.step" (an i64 scalar) for every parameter.
  std::map<std::string, Tensor> state_dict() const;
  // The inverse of state_dict: every key must be present with the parameter's shape and dtype
  // and no other key may be; all are checked before anything is copied.
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  struct Entry {
    std::string name;
    Tensor param;
    bool decay = true;
    ParamState state;
  };
  const Entry& entry(const std::string& name) const;

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  AdamWOptions opts_;
};

// Graph mode: one parameter's update, recorded into the step being captured, in the fused
// kernel's order of operations. `decay`, `neg_step_size` and `bc2_sqrt` are scalar inputs of the
// program (AdamW::next_scalars each step), so that one compiled step serves every step;
// `grad_scale` is the clipping coefficient computed in the program.
struct LoweredAdamW {
  graph::Value param = {}, exp_avg = {}, exp_avg_sq = {};
};
LoweredAdamW adamw_update_lowered(const graph::Value& param, const graph::Value& grad, const graph::Value& exp_avg,
                                  const graph::Value& exp_avg_sq, const graph::Value& decay,
                                  const graph::Value& neg_step_size, const graph::Value& bc2_sqrt,
                                  const graph::Value& grad_scale, const AdamWOptions& opts);

}  // namespace titan::optim
