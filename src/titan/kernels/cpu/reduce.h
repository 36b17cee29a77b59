#pragma once
// Reductions along one dim. The input is viewed as [outer, n, inner] (made contiguous by the
// caller); out is [outer, inner].
#include <cstdint>

namespace titan::kernels::cpu {

enum class ReduceOp { sum, mean, max };

template <typename T>
void reduce_dim(ReduceOp op, const T* x, T* out, int64_t outer, int64_t n, int64_t inner);
// Argmax indices alongside max (first index on ties), used by max's backward.
template <typename T>
void max_dim(const T* x, T* out, int64_t* idx, int64_t outer, int64_t n, int64_t inner);
// Variance with `correction` (0: population, 1: Bessel), two-pass for accuracy; mean optional.
template <typename T>
void var_dim(const T* x, T* out, T* mean, int64_t outer, int64_t n, int64_t inner, int64_t correction);
// Sum of all elements, accumulated in double.
template <typename T>
double sum_all(const T* x, int64_t n);
// Sum of x^2 and max |x| over all elements, in double, in one read of x (a gradient norm's
// partials). The order of the sum is fixed by the thread count and the vector width alone.
template <typename T>
double sum_squares(const T* x, int64_t n);
template <typename T>
double max_abs(const T* x, int64_t n);

}  // namespace titan::kernels::cpu
