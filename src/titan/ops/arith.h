#pragma once
// Elementwise arithmetic with NumPy broadcasting. Operands must share a floating dtype (f32/f64).
#include "titan/core/tensor.h"

namespace titan::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor scale(const Tensor& x, double s);         // x * s
Tensor add_scalar(const Tensor& x, double c);    // x + c
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
// x limited to [lo, hi] (torch.clamp); the gradient passes where lo <= x <= hi, as PyTorch's does.
Tensor clamp(const Tensor& x, double lo, double hi);

}  // namespace titan::ops

namespace titan {
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& x) { return ops::neg(x); }
inline Tensor operator*(const Tensor& x, double s) { return ops::scale(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return ops::scale(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return ops::scale(x, 1.0 / s); }
inline Tensor operator+(const Tensor& x, double c) { return ops::add_scalar(x, c); }
inline Tensor operator-(const Tensor& x, double c) { return ops::add_scalar(x, -c); }
}  // namespace titan
