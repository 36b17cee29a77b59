#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

// y = x / sqrt(mean(x^2, last dim) + eps) * weight. x [..., d], weight [d] (undefined: no scale).
// Forward and backward are fused kernels; backward reuses the saved per-row 1/rms.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (population variance, as
// torch.nn.functional.layer_norm). weight and bias [d], either may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace titan::ops
