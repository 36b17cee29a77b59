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

// The max is taken over the raw logits: with inv_t > 0 it scales to the max of the scaled ones.
template <typename T>
MaxSum<T> max_sum_exp(const T* x, int64_t n, T inv_t, int64_t chunk) {
  MaxSum<T> acc;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const T* p = x + c0;
    const int64_t len = std::min(chunk, n - c0);
    T m = -std::numeric_limits<T>::infinity();
    // Spelled as a select: GCC 12 leaves std::max(m, p[i]) scalar here, 20x slower.
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < len; ++i) m = p[i] > m ? p[i] : m;
    m *= inv_t;
    const T shift = shift_of(m);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += vexp(p[i] * inv_t - shift);
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

template <typename T>
void row_logsumexp(const T* logits, int64_t rows, int64_t vocab, T inv_temperature, T* lse, int64_t chunk) {
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t seg = chunk * kSegmentChunks;
  const int64_t per_row = segments_per_row(vocab, seg);
  std::vector<MaxSum<T>> parts(static_cast<size_t>(rows * per_row));
  for_each_segment(rows, vocab, seg, [&](int64_t r, int64_t piece, int64_t b, int64_t e) {
    parts[piece] = max_sum_exp(logits + r * vocab + b, e - b, inv_temperature, chunk);
  });
  parallel_for(0, rows, std::max<int64_t>(1, 4096 / per_row), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      MaxSum<T> acc = parts[r * per_row];
      for (int64_t k = 1; k < per_row; ++k) acc = merge(acc, parts[r * per_row + k]);
      lse[r] = shift_of(acc.m) + std::log(acc.s);
    }
  });
}

template <typename T, typename I>
CrossEntropySums cross_entropy_forward(const T* logits, const I* targets, int64_t rows, int64_t vocab,
                                       int64_t ignore_index, T* lse, int64_t chunk) {
  row_logsumexp(logits, rows, vocab, T(1), lse, chunk);
  CrossEntropySums sums;
  for (int64_t r = 0; r < rows; ++r) {
    if (ignored(targets[r], ignore_index)) continue;
    sums.loss += static_cast<double>(lse[r]) -
                 static_cast<double>(logits[r * vocab + static_cast<int64_t>(targets[r])]);
    ++sums.count;
  }
  return sums;
}

namespace {
// (softmax at the temperature - onehot) * scale_of(r), one pass; ignored rows get zeros.
template <typename T, typename I, typename Scale>
void scaled_softmax_minus_onehot(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                                 int64_t ignore_index, T inv_t, const Scale& scale_of, T* dlogits) {
  const int64_t seg = kCrossEntropyChunkBytes / static_cast<int64_t>(sizeof(T)) * kSegmentChunks;
  for_each_segment(rows, vocab, seg, [&](int64_t r, int64_t, int64_t b, int64_t e) {
    const T* x = logits + r * vocab;
    T* d = dlogits + r * vocab;
    if (ignored(targets[r], ignore_index)) {
      std::fill(d + b, d + e, T(0));
      return;
    }
    const T l = lse[r], scale = scale_of(r);
    for (int64_t j = b; j < e; ++j) d[j] = vexp(x[j] * inv_t - l) * scale;
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t >= b && t < e) d[t] -= scale;
  });
}
}  // namespace

template <typename T, typename I>
void cross_entropy_backward(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                            int64_t ignore_index, T scale, T* dlogits) {
  scaled_softmax_minus_onehot(
      logits, targets, lse, rows, vocab, ignore_index, T(1), [scale](int64_t) { return scale; }, dlogits);
}

template <typename T, typename I>
void token_log_probs_forward(const T* logits, const I* targets, int64_t rows, int64_t vocab,
                             int64_t ignore_index, T inv_temperature, T* lse, T* out) {
  row_logsumexp(logits, rows, vocab, inv_temperature, lse);
  for (int64_t r = 0; r < rows; ++r)
    out[r] = ignored(targets[r], ignore_index)
                 ? T(0)
                 : logits[r * vocab + static_cast<int64_t>(targets[r])] * inv_temperature - lse[r];
}

template <typename T, typename I>
void softmax_onehot_backward(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                             int64_t ignore_index, T inv_temperature, const T* scale, T* dlogits) {
  scaled_softmax_minus_onehot(
      logits, targets, lse, rows, vocab, ignore_index, inv_temperature,
      [scale](int64_t r) { return scale[r]; }, dlogits);
}

template <typename T>
void row_entropy(const T* logits, const T* lse, int64_t rows, int64_t vocab, T inv_temperature, T* out) {
  const int64_t seg = kCrossEntropyChunkBytes / static_cast<int64_t>(sizeof(T)) * kSegmentChunks;
  const int64_t per_row = segments_per_row(vocab, seg);
  // Sums in double: f32 sums over a segment of 16k similar terms drift by 1e-4 relative.
  struct Sums {
    double weighted = 0;  // sum of p_j * (lse - z_j)
    double mass = 0;      // sum of p_j: 1 but for lse's rounding
  };
  std::vector<Sums> parts(static_cast<size_t>(rows * per_row));
  for_each_segment(rows, vocab, seg, [&](int64_t r, int64_t piece, int64_t b, int64_t e) {
    const T* x = logits + r * vocab;
    const T l = lse[r];
    double w = 0, m = 0;
    // p = 0 (a -inf logit, or one far below the max) adds nothing, and must not add 0 * inf.
#pragma omp simd reduction(+ : w, m)
    for (int64_t j = b; j < e; ++j) {
      const T z = x[j] * inv_temperature;
      const T p = vexp(z - l);
      w += p > T(0) ? static_cast<double>(p * (l - z)) : 0.0;
      m += static_cast<double>(p);
    }
    parts[piece] = {w, m};
  });
  // With S = sum p_j, the normalised p_j / S give H = W / S + log S exactly: an error e in lse
  // scales every p_j by exp(-e) and would otherwise shift H by about e * (H - 1).
  for (int64_t r = 0; r < rows; ++r) {
    double w = 0, m = 0;
    for (int64_t k = 0; k < per_row; ++k) {
      w += parts[r * per_row + k].weighted;
      m += parts[r * per_row + k].mass;
    }
    out[r] = static_cast<T>(w / m + std::log(m));
  }
}

#define TITAN_INSTANTIATE(T, I)                                                                            \
  template CrossEntropySums cross_entropy_forward<T, I>(const T*, const I*, int64_t, int64_t, int64_t, T*, \
                                                        int64_t);                                          \
  template void cross_entropy_backward<T, I>(const T*, const I*, const T*, int64_t, int64_t, int64_t, T,   \
                                             T*);                                                          \
  template void token_log_probs_forward<T, I>(const T*, const I*, int64_t, int64_t, int64_t, T, T*, T*);   \
  template void softmax_onehot_backward<T, I>(const T*, const I*, const T*, int64_t, int64_t, int64_t, T,  \
                                              const T*, T*);
TITAN_FOR_EACH_FLOAT_INDEX(TITAN_INSTANTIATE)
#undef TITAN_INSTANTIATE
template void row_logsumexp<float>(const float*, int64_t, int64_t, float, float*, int64_t);
template void row_logsumexp<double>(const double*, int64_t, int64_t, double, double*, int64_t);
template void row_entropy<float>(const float*, const float*, int64_t, int64_t, float, float*);
template void row_entropy<double>(const double*, const double*, int64_t, int64_t, double, double*);

}  // namespace titan::kernels::cpu
