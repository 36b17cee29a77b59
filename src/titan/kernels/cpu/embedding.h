#pragma once
// Embedding gather and its scatter-add backward, over ids of type I (int32_t or int64_t) and
// weights of type T (float or double). The kernels trust the ids: callers validate them first
// with check_index_range, outside any parallel region. check_index_range and
// dispatch_float_index serve every op driven by integer indices (cross-entropy's targets too).
#include <cstdint>
#include <optional>

#include "titan/core/tensor.h"

namespace titan::kernels::cpu {

// Throws a titan::Error naming `op`, the first entry of the i32/i64 tensor `idx` outside
// [0, hi), its position in idx and the valid range; entries equal to `skip` are allowed.
// `what` names the entries in the message ("id", "target").
void check_index_range(const char* op, const char* what, const Tensor& idx, int64_t hi,
                       std::optional<int64_t> skip = std::nullopt);

// Calls f(T{}, I{}) with T the float type of `value` (f32 or f64) and I the integer type of
// `index` (i32 or i64); callers have checked both dtypes.
template <typename F>
void dispatch_float_index(DType value, DType index, const F& f) {
  auto with_index = [&](auto t) {
    if (index == kI32)
      f(t, int32_t{});
    else
      f(t, int64_t{});
  };
  if (value == kF32)
    with_index(float{});
  else
    with_index(double{});
}

// out[i, :] = weight[ids[i], :] for i in [0, n); weight is [vocab, dim], out is [n, dim].
template <typename T, typename I>
void embedding_forward(const I* ids, int64_t n, const T* weight, int64_t dim, T* out);

// dweight = sum over i with ids[i] == v of dout[i, :] for every row v in [0, vocab); dweight is
// overwritten (rows no id selects become zero). Each element is summed in token order whatever
// the thread count, so the result is bit-identical from 1 thread to many.
template <typename T, typename I>
void embedding_backward(const I* ids, int64_t n, const T* dout, int64_t dim, int64_t vocab, T* dweight);

}  // namespace titan::kernels::cpu
