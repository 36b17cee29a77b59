#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

// out[..., :] = weight[ids[...], :]. ids i32 or i64 of any shape, weight [vocab, dim]. An id
// outside [0, vocab) is an error naming it. Backward scatter-adds into weight's gradient.
Tensor embedding(const Tensor& ids, const Tensor& weight);

}  // namespace titan::ops
