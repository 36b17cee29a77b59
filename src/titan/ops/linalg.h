#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

// a [..., m, k] @ b [..., k, n] with broadcast batch dims. Transposed views are passed to BLAS as
// transposes, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T (+ bias[out]): the layout of nn.Linear and of PyTorch.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace titan::ops
