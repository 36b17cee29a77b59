#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan::ops {

// Nearest-neighbour upsampling of x [N, C, H, W] (f32 or f64) by an integer factor on H and W ->
// [N, C, H * factor, W * factor] (torch interpolate, mode="nearest", scale_factor=factor).
Tensor upsample_nearest(const Tensor& x, int64_t factor);

}  // namespace titan::ops
