#include "titan/kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/streaming_store.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::kernels::cpu {

namespace {

// Each task takes whole rows, at least this many elements of them: a row is read two or three
// times, so it should stay in the task's L1/L2 between passes.
template <typename F>
void for_rows(int64_t rows, int64_t n, const F& f) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f(r * n);
  });
}

// The simd reduction lets the compiler keep one partial sum per vector lane, which strict IEEE
// ordering would otherwise forbid (it would not vectorise the sum).
template <typename T>
T row_sum(const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// The exponentials of one row, when they cannot wait in the output row: that row is then written
// by streaming stores, which need the values ready in cache.
template <typename T>
T* row_scratch(int64_t n) {
  thread_local std::vector<T> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(static_cast<size_t>(n));
  return scratch.data();
}

}  // namespace

// Every row is read from memory once (the passes after the first hit L2) and, for outputs beyond
// the cache, written once with no read-for-ownership: see streaming_store.h.
template <typename T>
void softmax_fwd(SoftmaxKind kind, const T* x, T* y, int64_t rows, int64_t n) {
  const bool stream = wants_streaming(rows * n, sizeof(T));
  for_rows(rows, n, [&](int64_t off) {
    const T* xr = x + off;
    T* yr = y + off;
    const T m = row_max(xr, n);
    T s = 0;
    if (kind == SoftmaxKind::softmax) {
      T* e_row = stream ? row_scratch<T>(n) : yr;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) {
        const T e = vexp(xr[i] - m);
        e_row[i] = e;
        s += e;
      }
      const T inv = T(1) / s;
      write_elements(yr, n, stream, [&](T* out, int64_t b, int64_t len) {
        for (int64_t i = 0; i < len; ++i) out[i] = e_row[b + i] * inv;
      });
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += vexp(xr[i] - m);
      // (x - m) - log s, not x - (m + log s): the latter rounds at the scale of m, which loses
      // digits when logits are large and close together.
      const T log_s = std::log(s);
      write_elements(yr, n, stream, [&](T* out, int64_t b, int64_t len) {
        for (int64_t i = 0; i < len; ++i) out[i] = (xr[b + i] - m) - log_s;
      });
    }
  });
}

template <typename T>
void softmax_bwd(SoftmaxKind kind, const T* y, const T* dy, T* dx, int64_t rows, int64_t n) {
  const bool stream = wants_streaming(rows * n, sizeof(T));
  for_rows(rows, n, [&](int64_t off) {
    const T* yr = y + off;
    const T* gr = dy + off;
    T* dr = dx + off;
    if (kind == SoftmaxKind::softmax) {
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += gr[i] * yr[i];
      write_elements(dr, n, stream, [&](T* out, int64_t b, int64_t len) {
        for (int64_t i = 0; i < len; ++i) out[i] = yr[b + i] * (gr[b + i] - dot);
      });
    } else {
      const T s = row_sum(gr, n);
      write_elements(dr, n, stream, [&](T* out, int64_t b, int64_t len) {
        for (int64_t i = 0; i < len; ++i) out[i] = gr[b + i] - vexp(yr[b + i]) * s;
      });
    }
  });
}

#define TITAN_INSTANTIATE(T)                                                 \
  template void softmax_fwd<T>(SoftmaxKind, const T*, T*, int64_t, int64_t); \
  template void softmax_bwd<T>(SoftmaxKind, const T*, const T*, T*, int64_t, int64_t);
TITAN_INSTANTIATE(float)
TITAN_INSTANTIATE(double)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
