#pragma once
// Maps run-time dtypes to the template types kernels are written in. Callers check the dtypes
// first (ops/checks.h), so the fall-through cases are never wrong types.
#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::kernels::cpu {

// f(T{}) with T = float for f32, double for f64.
template <typename F>
void dispatch_float(DType value, const F& f) {
  if (value == kF32)
    f(float{});
  else
    f(double{});
}

// f(T{}) for the operand types of a matrix product: float, double, and bf16 (whose products are
// float32, gemm_acc_t).
template <typename F>
void dispatch_matmul(DType value, const F& f) {
  if (value == kBF16)
    f(bf16{});
  else
    dispatch_float(value, f);
}

// f(T{}, I{}) with T the float type of `value` and I the integer type of `index` (i32 or i64).
template <typename F>
void dispatch_float_index(DType value, DType index, const F& f) {
  dispatch_float(value, [&](auto t) {
    if (index == kI32)
      f(t, int32_t{});
    else
      f(t, int64_t{});
  });
}

}  // namespace titan::kernels::cpu

// Expands M(T, I) for every (float, index) pair dispatch_float_index produces: the explicit
// instantiations of a kernel template that dispatch_float_index calls.
#define TITAN_FOR_EACH_FLOAT_INDEX(M) \
  M(float, int32_t) M(float, int64_t) M(double, int32_t) M(double, int64_t)
