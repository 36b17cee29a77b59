#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan::ops {

// torch.nn.functional.group_norm: x [N, C, *] (f32 or f64), its C channels split into `groups`
// groups of consecutive channels (groups divides C), each (image, group) normalised over its
// channels and positions with the population variance; weight and bias [C] or undefined.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace titan::ops
