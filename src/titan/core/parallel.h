#pragma once
// Parallel loops over OpenMP, the one thread pool that OpenBLAS (OpenMP build) shares with us.
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace titan {

inline int num_threads() { return omp_get_max_threads(); }
inline void set_num_threads(int n) { omp_set_num_threads(n); }

// Calls f(begin, end) on disjoint chunks covering [begin, end). Runs inline when the range is
// smaller than `grain` or when already inside a parallel region (no nested teams).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  if (n <= grain || omp_in_parallel() || omp_get_max_threads() == 1) {
    f(begin, end);
    return;
  }
  int64_t max_chunks = (n + grain - 1) / std::max<int64_t>(grain, 1);
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(omp_get_max_threads(), max_chunks)))
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b < e) f(b, e);
  }
}

}  // namespace titan
