#include "titan/nn/moe/experts.h"

#include "titan/nn/init.h"
#include "titan/ops/moe.h"

namespace titan::nn::moe {

GroupedExperts::GroupedExperts(int64_t num_experts, int64_t dim, int64_t hidden_dim, double init_std,
                               TensorOptions opts)
    : init_std_(init_std) {
  TITAN_CHECK(num_experts > 0 && dim > 0 && hidden_dim > 0, "moe::GroupedExperts: num_experts (", num_experts,
              "), dim (", dim, ") and hidden_dim (", hidden_dim, ") must be positive");
  w1 = register_parameter("w1", Tensor::zeros({num_experts, hidden_dim, dim}, opts));
  w2 = register_parameter("w2", Tensor::zeros({num_experts, dim, hidden_dim}, opts));
  w3 = register_parameter("w3", Tensor::zeros({num_experts, hidden_dim, dim}, opts));
}

Tensor GroupedExperts::forward(const Tensor& rows, const ops::GroupSizes& rows_per_expert) const {
  return ops::grouped_linear(ops::grouped_swiglu(rows, w1, w3, rows_per_expert), w2, rows_per_expert);
}

void GroupedExperts::reset_parameters(Generator& gen) {
  init::trunc_normal_(w1, 0.0, 0.02, -2.0, 2.0, gen);
  init::trunc_normal_(w2, 0.0, init_std_, -2.0, 2.0, gen);
  init::trunc_normal_(w3, 0.0, init_std_, -2.0, 2.0, gen);
}

}  // namespace titan::nn::moe
