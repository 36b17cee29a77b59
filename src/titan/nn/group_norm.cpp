#include "titan/nn/group_norm.h"

#include "titan/nn/init.h"
#include "titan/ops/group_norm.h"

namespace titan::nn {

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine, TensorOptions opts)
    : groups_(groups), eps_(eps) {
  TITAN_CHECK(groups > 0 && channels > 0 && channels % groups == 0 && eps >= 0,
              "nn::GroupNorm: expected groups > 0 dividing channels > 0 and eps >= 0, got groups=", groups,
              " channels=", channels, " eps=", eps);
  if (!affine) return;
  weight = register_parameter("weight", Tensor::ones({channels}, opts));
  bias = register_parameter("bias", Tensor::zeros({channels}, opts));
}

Tensor GroupNorm::forward(const Tensor& x) const {
  return ops::group_norm(x, groups_, weight, bias, eps_);
}

void GroupNorm::reset_parameters(Generator&) {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

}  // namespace titan::nn
