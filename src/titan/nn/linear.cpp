#include "titan/nn/linear.h"

#include <cmath>

#include "titan/nn/init.h"
#include "titan/ops/linalg.h"

namespace titan::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, TensorOptions opts) {
  TITAN_CHECK(in_features > 0 && out_features > 0,
              "nn::Linear: features must be positive, got in=", in_features, " out=", out_features);
  weight = register_parameter("weight", Tensor::zeros({out_features, in_features}, opts));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out_features}, opts));
}

Tensor Linear::forward(const Tensor& x) const {
  return ops::linear(x, weight, bias);
}

void Linear::reset_parameters(Generator& gen) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features()));
  init::uniform_(weight, -bound, bound, gen);
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

}  // namespace titan::nn
