#pragma once
// Embedding gather and its scatter-add backward, over ids of type I (int32_t or int64_t) and
// weights of type T (float or double). The kernels trust the ids: callers validate them first
// with check_index_range (index_check.h), outside any parallel region.
#include <cstdint>

namespace titan::kernels::cpu {

// out[i, :] = weight[ids[i], :] for i in [0, n); weight is [vocab, dim], out is [n, dim].
template <typename T, typename I>
void embedding_forward(const I* ids, int64_t n, const T* weight, int64_t dim, T* out);

// dweight = sum over i with ids[i] == v of dout[i, :] for every row v in [0, vocab); dweight is
// overwritten (rows no id selects become zero). Each element is summed in token order whatever
// the thread count, so the result is bit-identical from 1 thread to many.
template <typename T, typename I>
void embedding_backward(const I* ids, int64_t n, const T* dout, int64_t dim, int64_t vocab, T* dweight);

}  // namespace titan::kernels::cpu
