#include "titan/kernels/cpu/embedding.h"

#include <algorithm>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/dispatch.h"

namespace titan::kernels::cpu {

namespace {
// Elements a thread should own before a loop is worth splitting.
constexpr int64_t kGrain = 32768;
}  // namespace

template <typename T, typename I>
void embedding_forward(const I* ids, int64_t n, const T* weight, int64_t dim, T* out) {
  parallel_for(0, n, std::max<int64_t>(1, kGrain / std::max<int64_t>(dim, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::copy_n(weight + static_cast<int64_t>(ids[i]) * dim, dim, out + i * dim);
  });
}

template <typename T, typename I>
void embedding_backward(const I* ids, int64_t n, const T* dout, int64_t dim, int64_t vocab, T* dweight) {
  // Threads own column blocks of whole cache lines (no false sharing) and walk every token in
  // order: no atomics, no per-thread copies of the gradient, and each sum runs in token order.
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  const int64_t blocks = (dim + kLine - 1) / kLine;
  const int64_t block_work = std::max<int64_t>((vocab + n) * kLine, 1);
  parallel_for(0, blocks, std::max<int64_t>(1, kGrain / block_work), [&](int64_t b, int64_t e) {
    const int64_t c0 = b * kLine, w = std::min(dim, e * kLine) - c0;
    for (int64_t v = 0; v < vocab; ++v) std::fill_n(dweight + v * dim + c0, w, T(0));
    for (int64_t i = 0; i < n; ++i) {
      T* dst = dweight + static_cast<int64_t>(ids[i]) * dim + c0;
      const T* src = dout + i * dim + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
    }
  });
}

#define TITAN_INSTANTIATE(T, I)                                                    \
  template void embedding_forward<T, I>(const I*, int64_t, const T*, int64_t, T*); \
  template void embedding_backward<T, I>(const I*, int64_t, const T*, int64_t, int64_t, T*);
TITAN_FOR_EACH_FLOAT_INDEX(TITAN_INSTANTIATE)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
