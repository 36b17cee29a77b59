#include "titan/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::kernels::cpu {

namespace {
// Elements a thread should own before a loop is worth splitting.
constexpr int64_t kGrain = 32768;
// Chunks per segment, the unit of work handed to a thread (64 KiB of f32): large enough to
// amortise the merge, small enough that 8 rows of 128k logits still make 64 pieces.
constexpr int64_t kSegmentChunks = 16;

// A span of logits summarised by its max m and s = sum of exp(x - shift_of(m)).
template <typename T>
struct MaxSum {
  T m = -std::numeric_limits<T>::infinity();
  T s = 0;
};

// A span of -inf logits shifts by 0 instead of its max, which keeps exp(-inf - -inf) = NaN out
// of a sum that should be empty; masked-out vocabulary is then harmless.
template <typename T>
T shift_of(T m) {
  return m == -std::numeric_limits<T>::infinity() ? T(0) : m;
}

// Rescales both sums to the larger max. Equal maxima skip the exponential, which also keeps two
// -inf maxima from producing NaN; a NaN anywhere reaches s.
template <typename T>
MaxSum<T> merge(MaxSum<T> a, MaxSum<T> b) {
  const T m = std::max(a.m, b.m);
  const T sa = a.m == m ? a.s : a.s * vexp(a.m - m);
  const T sb = b.m == m ? b.s : b.s * vexp(b.m - m);
  return {m, sa + sb};
}

template <typename T>
MaxSum<T> max_sum_exp(const T* x, int64_t n, int64_t chunk) {
  MaxSum<T> acc;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const T* p = x + c0;
    const int64_t len = std::min(chunk, n - c0);
    T m = -std::numeric_limits<T>::infinity();
    // Spelled as a select: GCC 12 leaves std::max(m, p[i]) scalar here, 20x slower.
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < len; ++i) m = p[i] > m ? p[i] : m;
    const T shift = shift_of(m);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += vexp(p[i] - shift);
    acc = merge(acc, {m, s});
  }
  return acc;
}

int64_t segments_per_row(int64_t vocab, int64_t seg) {
  return std::max<int64_t>(1, (vocab + seg - 1) / seg);
}

// Calls f(row, piece, begin, end) for every segment [begin, end) of every row; piece numbers the
// segments row-major. Threads take contiguous runs of pieces.
template <typename F>
void for_each_segment(int64_t rows, int64_t vocab, int64_t seg, const F& f) {
  const int64_t per_row = segments_per_row(vocab, seg);
  const int64_t len = std::max<int64_t>(1, std::min(seg, vocab));
  parallel_for(0, rows * per_row, std::max<int64_t>(1, kGrain / len), [&](int64_t b, int64_t e) {
    for (int64_t piece = b; piece < e; ++piece) {
      const int64_t r = piece / per_row, c0 = (piece % per_row) * seg;
      f(r, piece, c0, std::min(vocab, c0 + seg));
    }
  });
}

template <typename I>
bool ignored(I t, int64_t ignore_index) {
  return static_cast<int64_t>(t) == ignore_index;
}
}  // namespace

template <typename T, typename I>
CrossEntropySums cross_entropy_forward(const T* logits, const I* targets, int64_t rows, int64_t vocab,
                                       int64_t ignore_index, T* lse, int64_t chunk) {
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t seg = chunk * kSegmentChunks;
  const int64_t per_row = segments_per_row(vocab, seg);
  std::vector<MaxSum<T>> parts(static_cast<size_t>(rows * per_row));
  for_each_segment(rows, vocab, seg, [&](int64_t r, int64_t piece, int64_t b, int64_t e) {
    parts[piece] = max_sum_exp(logits + r * vocab + b, e - b, chunk);
  });
  std::vector<double> row_loss(static_cast<size_t>(rows));
  parallel_for(0, rows, std::max<int64_t>(1, 4096 / per_row), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      MaxSum<T> acc = parts[r * per_row];
      for (int64_t k = 1; k < per_row; ++k) acc = merge(acc, parts[r * per_row + k]);
      lse[r] = shift_of(acc.m) + std::log(acc.s);
      row_loss[r] = ignored(targets[r], ignore_index)
                        ? 0.0
                        : static_cast<double>(lse[r]) -
                              static_cast<double>(logits[r * vocab + static_cast<int64_t>(targets[r])]);
    }
  });
  CrossEntropySums sums;
  for (int64_t r = 0; r < rows; ++r) {
    sums.loss += row_loss[r];
    sums.count += ignored(targets[r], ignore_index) ? 0 : 1;
  }
  return sums;
}

template <typename T, typename I>
void cross_entropy_backward(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                            int64_t ignore_index, T scale, T* dlogits) {
  const int64_t seg = kCrossEntropyChunkBytes / static_cast<int64_t>(sizeof(T)) * kSegmentChunks;
  for_each_segment(rows, vocab, seg, [&](int64_t r, int64_t, int64_t b, int64_t e) {
    const T* x = logits + r * vocab;
    T* d = dlogits + r * vocab;
    if (ignored(targets[r], ignore_index)) {
      std::fill(d + b, d + e, T(0));
      return;
    }
    const T l = lse[r];
    for (int64_t j = b; j < e; ++j) d[j] = vexp(x[j] - l) * scale;
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t >= b && t < e) d[t] -= scale;
  });
}

#define TITAN_INSTANTIATE(T, I)                                                                            \
  template CrossEntropySums cross_entropy_forward<T, I>(const T*, const I*, int64_t, int64_t, int64_t, T*, \
                                                        int64_t);                                          \
  template void cross_entropy_backward<T, I>(const T*, const I*, const T*, int64_t, int64_t, int64_t, T, T*);
TITAN_FOR_EACH_FLOAT_INDEX(TITAN_INSTANTIATE)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
