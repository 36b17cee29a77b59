#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace titan::ops
