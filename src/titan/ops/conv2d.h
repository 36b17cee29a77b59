#pragma once
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan::ops {

// Zero padding on each side, which may differ (diffusers' Downsample2D pads 0 top/left and 1
// bottom/right before its stride-2 convolution).
struct Conv2dOptions {
  int64_t stride = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

// x [N, C, H, W], weight [O, C, kh, kw], bias [O] or undefined -> [N, O, H', W'] with
// H' = (H + pad_top + pad_bottom - kh) / stride + 1 (W' likewise); groups 1, dilation 1, as
// torch.nn.functional.conv2d after F.pad. f32 or f64; under autocast (core/autocast.h) an f32
// convolution multiplies bf16 copies of x and weight with f32 accumulation and returns f32.
// Gradients for x, weight and bias.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);

}  // namespace titan::ops
