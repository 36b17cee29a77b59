#pragma once
// Normalisation over the last dim of a contiguous [rows, d] input (d > 0). RMSNorm is LayerNorm
// without centring and bias, so both share one kernel family.
//
// Row statistics are accumulated in T across the SIMD lanes (8 or 16 independent partial sums for
// f32), so rounding error grows with d / lanes rather than d, then combined in double. LayerNorm
// makes two passes over the row (still in L1): the mean, then the centred sums, whose first-order
// term corrects the mean's rounding error; the variance never takes E[x^2] - mean^2, which cancels
// catastrophically when |mean| >> std.
//
// Backward computes dx and the parameter gradients in one sweep over the rows. Parameter gradients
// are summed per block of rows and the blocks then added in order; the blocks depend on the shape
// only, so the result is bitwise the same whatever the thread count.
//
// Optional pointers (weight, bias, and every gradient output) may be null: absent parameters, or
// gradients nobody asked for.
#include <cstdint>

namespace titan::kernels::cpu {

// y = x * rstd * weight, rstd[r] = 1 / sqrt(mean(x[r]^2) + eps).
template <typename T>
void rms_norm_fwd(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t d, double eps);
template <typename T>
void rms_norm_bwd(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight, int64_t rows,
                  int64_t d);

// y = (x - mean) * rstd * weight + bias, rstd[r] = 1 / sqrt(var(x[r]) + eps) (population variance).
template <typename T>
void layer_norm_fwd(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                    int64_t d, double eps);
template <typename T>
void layer_norm_bwd(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight,
                    T* dbias, int64_t rows, int64_t d);

}  // namespace titan::kernels::cpu
