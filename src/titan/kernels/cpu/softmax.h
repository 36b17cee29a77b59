#pragma once
// Softmax and log-softmax along the last dim of a contiguous [rows, n] buffer (the op moves any
// other dim last first). f32 and f64. Numerically stable: the row max is subtracted before
// exponentiating, so large entries cannot overflow, and -inf entries give exact zeros (a row
// that is all -inf gives NaN, as in PyTorch).
#include <cstdint>

namespace titan::kernels::cpu {

enum class SoftmaxKind { softmax, log_softmax };

template <typename T>
void softmax_fwd(SoftmaxKind kind, const T* x, T* y, int64_t rows, int64_t n);
// From the forward output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
void softmax_bwd(SoftmaxKind kind, const T* y, const T* dy, T* dx, int64_t rows, int64_t n);

}  // namespace titan::kernels::cpu
