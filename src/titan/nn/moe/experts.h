#pragma once
// The experts of an MoE layer: E SwiGLU feed-forwards stored as stacked weights, applied to tokens
// already grouped by expert with one GEMM per expert and projection.
#include <cstdint>
#include <vector>

#include "titan/nn/module.h"
#include "titan/ops/moe.h"

namespace titan::nn::moe {

class GroupedExperts : public Module {
 public:
  // `init_std`: the std of w2 and w3 at initialisation (depth-scaled by the model).
  GroupedExperts(int64_t num_experts, int64_t dim, int64_t hidden_dim, double init_std,
                 TensorOptions opts = {});

  // rows [n, dim] grouped by expert, rows_per_expert[e] of them for expert e -> [n, dim]:
  // each group's w2_e(silu(w1_e x) * w3_e x). The expert count is w1's first size, so an
  // expert-parallel plan that keeps a slice of the experts leaves this code as it is.
  Tensor forward(const Tensor& rows, const ops::GroupSizes& rows_per_expert) const;
  Tensor operator()(const Tensor& rows, const ops::GroupSizes& rows_per_expert) {
    return run_forward([&] { return forward(rows, rows_per_expert); });
  }
  // TorchTitan's: w1 truncated normal with std 0.02; w2 and w3 with init_std.
  void reset_parameters(Generator& gen) override;

  int64_t num_experts() const { return w1.size(0); }

  Tensor w1;  // [experts, hidden, dim]  gate projection
  Tensor w2;  // [experts, dim, hidden]  down projection
  Tensor w3;  // [experts, hidden, dim]  up projection

 private:
  double init_std_;
};

}  // namespace titan::nn::moe
