#include "titan/kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {
// max that propagates NaN, as torch.max does.
template <typename T>
T max_nan(T a, T v) {
  return (v > a || v != v) ? v : a;
}

// Rows of length n at stride `inner`: for inner == 1 a contiguous dot-like loop; otherwise a
// vectorisable sweep over `inner` columns per step of n.
template <typename T, typename Init, typename Step>
void reduce_rows(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, Init init, Step step) {
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* r = x + o * n;
        T acc = init;
        for (int64_t i = 0; i < n; ++i) acc = step(acc, r[i]);
        out[o] = acc;
      }
    });
    return;
  }
  parallel_for(0, outer, 1, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      T* dst = out + o * inner;
      std::fill(dst, dst + inner, init);
      for (int64_t i = 0; i < n; ++i) {
        const T* r = x + (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] = step(dst[j], r[j]);
      }
    }
  });
}
}  // namespace

template <typename T>
void reduce_dim(ReduceOp op, const T* x, T* out, int64_t outer, int64_t n, int64_t inner) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      if (inner == 1) {  // lane-parallel partial sums: vectorised, and more accurate than one chain
        parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t o = b; o < e; ++o) {
                         const T* r = x + o * n;
                         T acc = 0;
#pragma omp simd reduction(+ : acc)
                         for (int64_t i = 0; i < n; ++i) acc += r[i];
                         out[o] = acc;
                       }
                     });
      } else {
        reduce_rows(x, out, outer, n, inner, T(0), [](T a, T v) { return a + v; });
      }
      if (op == ReduceOp::mean) {
        T s = n > 0 ? T(1) / static_cast<T>(n) : std::numeric_limits<T>::quiet_NaN();
        for (int64_t i = 0; i < outer * inner; ++i) out[i] *= s;
      }
      break;
    }
    case ReduceOp::max:
      // NaN-propagating, like torch.max. Not vectorised for inner == 1 (GCC 12 keeps a
      // NaN-aware max chain scalar); softmax and cross-entropy have their own lane-split maxima.
      reduce_rows(x, out, outer, n, inner, -std::numeric_limits<T>::infinity(), max_nan<T>);
      break;
  }
}

template <typename T>
void max_dim(const T* x, T* out, int64_t* idx, int64_t outer, int64_t n, int64_t inner) {
  parallel_for(0, outer * inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / inner, j = k % inner;
      const T* r = x + o * n * inner + j;
      T best = r[0];
      int64_t bi = 0;
      for (int64_t i = 1; i < n; ++i) {
        T v = r[i * inner];
        if (v > best || (v != v && best == best)) {
          best = v;
          bi = i;
        }
      }
      out[k] = best;
      idx[k] = bi;
    }
  });
}

template <typename T>
void var_dim(const T* x, T* out, T* mean, int64_t outer, int64_t n, int64_t inner, int64_t correction) {
  std::vector<T> m(static_cast<size_t>(outer * inner));
  reduce_dim(ReduceOp::mean, x, m.data(), outer, n, inner);
  T denom = static_cast<T>(std::max<int64_t>(n - correction, 0));
  parallel_for(0, outer * inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / inner, j = k % inner;
      const T* r = x + o * n * inner + j;
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        double d = static_cast<double>(r[i * inner]) - static_cast<double>(m[k]);
        acc += d * d;
      }
      out[k] = static_cast<T>(acc / static_cast<double>(denom));
      if (mean) mean[k] = m[k];
    }
  });
}

template <typename T>
double sum_all(const T* x, int64_t n) {
  double total = 0;
#pragma omp parallel for reduction(+ : total) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  double total = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : total) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}

// NaN if any element is NaN, as a NaN gradient shows in PyTorch's inf-norm (a max would drop it).
template <typename T>
double max_abs(const T* x, int64_t n) {
  double top = 0;
  bool nan = false;
#pragma omp parallel for schedule(static) reduction(max : top) reduction(|| : nan) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::abs(static_cast<double>(x[i]));
    top = a > top ? a : top;
    nan = nan || std::isnan(a);
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : top;
}

#define TITAN_INSTANTIATE(T)                                                      \
  template void reduce_dim<T>(ReduceOp, const T*, T*, int64_t, int64_t, int64_t); \
  template void max_dim<T>(const T*, T*, int64_t*, int64_t, int64_t, int64_t);    \
  template void var_dim<T>(const T*, T*, T*, int64_t, int64_t, int64_t, int64_t); \
  template double sum_all<T>(const T*, int64_t);                                  \
  template double sum_squares<T>(const T*, int64_t);                              \
  template double max_abs<T>(const T*, int64_t);
TITAN_INSTANTIATE(float)
TITAN_INSTANTIATE(double)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
