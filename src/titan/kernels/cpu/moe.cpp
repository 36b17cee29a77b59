#include "titan/kernels/cpu/moe.h"

#include <algorithm>
#include <vector>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {
// Elements a thread should own before a loop is worth splitting.
constexpr int64_t kGrain = 32768;

int64_t rows_per_chunk(int64_t width) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1));
}
}  // namespace

template <typename T>
void topk_experts(const T* scores, const T* bias, int64_t tokens, int64_t experts, int64_t k, int64_t* ids,
                  T* weights) {
  parallel_for(0, tokens, rows_per_chunk(experts * k), [&](int64_t t0, int64_t t1) {
    std::vector<T> best(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      const T* s = scores + t * experts;
      int64_t* id = ids + t * k;
      // Insertion into a sorted list of the best so far. A later expert must beat a value strictly
      // to pass it, so among equal values the lower index stays ahead.
      int64_t n = 0;
      for (int64_t e = 0; e < experts; ++e) {
        const T v = bias ? s[e] + bias[e] : s[e];
        if (n == k && !(v > best[k - 1])) continue;
        int64_t pos = n < k ? n++ : k - 1;
        for (; pos > 0 && v > best[pos - 1]; --pos) {
          best[pos] = best[pos - 1];
          id[pos] = id[pos - 1];
        }
        best[pos] = v;
        id[pos] = e;
      }
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] = s[id[j]];
    }
  });
}

template <typename T>
void topk_experts_bwd(const T* d_weights, const int64_t* ids, int64_t tokens, int64_t experts, int64_t k,
                      T* d_scores) {
  parallel_for(0, tokens, rows_per_chunk(experts), [&](int64_t t0, int64_t t1) {
    std::fill(d_scores + t0 * experts, d_scores + t1 * experts, T(0));
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < k; ++j) d_scores[t * experts + ids[t * k + j]] += d_weights[t * k + j];
  });
}

void sort_by_expert(const int64_t* ids, int64_t tokens, int64_t k, int64_t experts, int64_t* counts,
                    int64_t* row_of, int64_t* token_of_row) {
  const int64_t pairs = tokens * k;
  std::fill(counts, counts + experts, int64_t{0});
  for (int64_t p = 0; p < pairs; ++p) ++counts[ids[p]];
  std::vector<int64_t> next(static_cast<size_t>(experts));
  for (int64_t e = 0, start = 0; e < experts; ++e) {
    next[e] = start;
    start += counts[e];
  }
  // Pairs in token order, so each expert's rows keep the tokens' order.
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t r = next[ids[p]]++;
    row_of[p] = r;
    token_of_row[r] = p / k;
  }
}

int64_t expert_slots(const int64_t* ids, int64_t tokens, int64_t k, int64_t experts, int64_t capacity,
                     int64_t* token_of_slot, int64_t* slot_of_pair, float* kept) {
  std::fill(token_of_slot, token_of_slot + experts * capacity, int64_t{0});
  std::vector<int64_t> filled(static_cast<size_t>(experts), 0);
  int64_t dropped = 0;
  for (int64_t p = 0; p < tokens * k; ++p) {
    const int64_t e = ids[p], c = filled[e]++;
    const bool in = c < capacity;
    slot_of_pair[p] = in ? e * capacity + c : 0;
    kept[p] = in ? 1.0f : 0.0f;
    if (in)
      token_of_slot[e * capacity + c] = p / k;
    else
      ++dropped;
  }
  return dropped;
}

template <typename T>
void gather_rows(const T* src, const int64_t* index, int64_t rows, int64_t d, T* dst) {
  parallel_for(0, rows, rows_per_chunk(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(src + index[r] * d, d, dst + r * d);
  });
}

template <typename T>
void combine_rows(const T* src, const int64_t* row_of, const T* w, int64_t tokens, int64_t k, int64_t d,
                  T* dst) {
  parallel_for(0, tokens, rows_per_chunk(d * k), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      T* out = dst + t * d;
      std::fill_n(out, d, T(0));
      for (int64_t j = 0; j < k; ++j) {
        const T* in = src + row_of[t * k + j] * d;
        const T wj = w ? w[t * k + j] : T(1);
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) out[c] += wj * in[c];
      }
    }
  });
}

template <typename T>
void combine_rows_bwd(const T* d_dst, const T* src, const int64_t* row_of, const T* w, int64_t tokens,
                      int64_t k, int64_t d, T* d_src, T* d_w) {
  parallel_for(0, tokens, rows_per_chunk(d * k), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* g = d_dst + t * d;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = row_of[t * k + j];
        if (d_src) {
          const T wj = w[t * k + j];
          T* out = d_src + r * d;
#pragma omp simd
          for (int64_t c = 0; c < d; ++c) out[c] = wj * g[c];
        }
        if (d_w) {
          const T* in = src + r * d;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t c = 0; c < d; ++c) acc += g[c] * in[c];
          d_w[t * k + j] = acc;
        }
      }
    }
  });
}

#define TITAN_INSTANTIATE(T)                                                                                 \
  template void topk_experts<T>(const T*, const T*, int64_t, int64_t, int64_t, int64_t*, T*);                \
  template void topk_experts_bwd<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*);                \
  template void gather_rows<T>(const T*, const int64_t*, int64_t, int64_t, T*);                              \
  template void combine_rows<T>(const T*, const int64_t*, const T*, int64_t, int64_t, int64_t, T*);          \
  template void combine_rows_bwd<T>(const T*, const T*, const int64_t*, const T*, int64_t, int64_t, int64_t, \
                                    T*, T*);
TITAN_INSTANTIATE(float)
TITAN_INSTANTIATE(double)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
