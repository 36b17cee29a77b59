#pragma once
// 2-D convolution through oneDNN's convolution primitives (forward, backward data, backward
// weights) on contiguous NCHW / OIHW buffers. oneDNN runs them in its blocked layouts (nChw16c on
// AVX-512) with its JIT kernels, AVX512-BF16 / AMX for bf16 with float32 accumulation; the
// operands are reordered into those layouts and the result back, inside the call. T is float or
// bf16; results and bias are always float32.
//
// A primitive (and its reorders) is made once per geometry, dtype and direction and cached.
// Each call returns false, computing nothing, when oneDNN has no implementation for the case (no
// AVX512-BF16 for bf16, say): the caller then takes the im2col path (conv2d.h) or refuses.
#include "titan/core/dtype.h"
#include "titan/kernels/cpu/conv2d.h"

namespace titan::kernels::cpu {

// y = conv(x, weight) + bias (bias may be null).
template <typename T>
bool onednn_conv2d_fwd(const Conv2dGeometry& g, const T* x, const T* weight, const float* bias, float* y);
// dx given dy, overwritten.
template <typename T>
bool onednn_conv2d_bwd_data(const Conv2dGeometry& g, const T* dy, const T* weight, float* dx);
// dweight given dy and x, overwritten. (The bias gradient, a sum of the float32 dy, is the
// caller's: bf16's dy is rounded.)
template <typename T>
bool onednn_conv2d_bwd_weight(const Conv2dGeometry& g, const T* dy, const T* x, float* dweight);

}  // namespace titan::kernels::cpu
