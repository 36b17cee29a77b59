#pragma once
// Elementwise kernels over strided, broadcast operands. `out` is contiguous with the broadcast
// shape; inputs carry stride 0 on broadcast dims (see broadcast_strides).
#include "titan/core/tensor.h"

namespace titan::kernels::cpu {

enum class BinaryOp { add, sub, mul, div };
enum class UnaryOp { neg, exp, log, sqrt, rsqrt, abs, square };

// Strides of `t` viewed as `shape` (NumPy broadcasting: missing or size-1 dims get stride 0).
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// out = alpha * (a op b), a and b broadcast to out's shape. f32 and f64.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0);
// out = f(x); x any strides with out's shape. f32 and f64.
void unary(UnaryOp op, const Tensor& x, const Tensor& out);
// out = x * scale + shift.
void affine(const Tensor& x, double scale, double shift, const Tensor& out);
// out = min(max(x, lo), hi).
void clamp(const Tensor& x, double lo, double hi, const Tensor& out);
// out = dy where lo <= x <= hi, else 0: clamp's backward. x, dy and out share a shape.
void clamp_backward(const Tensor& x, const Tensor& dy, double lo, double hi, const Tensor& out);
// out[i] = src[i] converted to out's dtype; src broadcast to out's shape; any dtypes.
void copy(const Tensor& src, const Tensor& out);
// dst += alpha * src in place; dst any strides, src broadcast to dst's shape.
void accumulate(const Tensor& dst, const Tensor& src, double alpha = 1.0);

}  // namespace titan::kernels::cpu
