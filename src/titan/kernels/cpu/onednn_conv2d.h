#pragma once
// 2-D convolution through oneDNN's convolution primitives (forward, backward data, backward
// weights) on contiguous NCHW / OIHW buffers. oneDNN runs them in its own layouts (nChw16c for
// f32 on AVX-512; NHWC with AMX tiles for bf16) with its JIT kernels; the operands are reordered
// into those layouts, converted on the way when they are stored in float32 and multiplied in bf16
// (one pass instead of a conversion and then a reorder), and the results reordered back, inside
// the call. Results are float32 (bf16 products accumulate in float32); the bias is float32.
//
// A primitive (and its reorders) is made once per geometry, dtypes and direction and cached.
// A call returns false, computing nothing, when oneDNN has no implementation for the case (no
// AVX512-BF16 for bf16, say): the caller then takes the im2col path (conv2d.h) or refuses.
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/kernels/cpu/conv2d.h"

namespace titan::kernels::cpu {

// What the products are computed in. T, the operands' type in memory, is float (either) or bf16
// (bf16 only).
enum class ConvCompute : uint8_t { f32, bf16 };

// y = conv(x, weight) + bias (bias may be null).
template <typename T>
bool onednn_conv2d_fwd(const Conv2dGeometry& g, ConvCompute compute, const T* x, const T* weight,
                       const float* bias, float* y);
// dx and dweight (either may be null: not wanted) given dy, overwritten. dy is reordered once for
// both. (The bias gradient, a sum of the float32 dy, is the caller's: a bf16 dy is rounded.)
template <typename T>
bool onednn_conv2d_bwd(const Conv2dGeometry& g, ConvCompute compute, const T* dy, const T* x, const T* weight,
                       float* dx, float* dweight);

}  // namespace titan::kernels::cpu
