#pragma once
// Token-choice top-k routing: a linear gate scores every expert, softmax makes the scores a
// distribution, and each token goes to its k best experts, weighted by their scores.
#include <cstdint>
#include <memory>
#include <vector>

#include "titan/nn/linear.h"

namespace titan::nn::moe {

struct Routing {
  Tensor scores;   // [tokens, experts]: softmax of the gate's logits
  Tensor weights;  // [tokens, k]: the chosen experts' scores (renormalised to sum 1 if asked)
  Tensor ids;      // [tokens, k] i64, best first; ties go to the lower expert index
  Tensor tokens_per_expert;  // [experts] i64: how many tokens chose each expert
};

class TopKRouter : public Module {
 public:
  // `expert_bias`: keep a bias per expert that steers the choice, never the weights (DeepSeek-V3's
  // auxiliary-loss-free load balancing); a persistent buffer, so checkpoints carry it.
  TopKRouter(int64_t dim, int64_t num_experts, int64_t top_k, bool norm_topk_prob, bool expert_bias,
             double init_std, TensorOptions opts = {});

  // x [tokens, dim].
  Routing route(const Tensor& x);
  // Nudges the bias of every expert by `rate` towards an even load: up for experts that got fewer
  // tokens than the mean, down for those that got more. Centred, so the biases keep summing to 0.
  void update_expert_bias(const std::vector<int64_t>& tokens_per_expert, double rate);
  // The gate: truncated normal with init_std (TorchTitan's); the bias starts at zero.
  void reset_parameters(Generator& gen) override;

  int64_t num_experts() const { return gate->out_features(); }
  int64_t top_k() const { return top_k_; }

  std::shared_ptr<Linear> gate;  // [experts, dim]
  Tensor expert_bias;            // [experts], or undefined without the bias

 private:
  int64_t top_k_;
  bool norm_topk_prob_;
  double init_std_;
};

}  // namespace titan::nn::moe
