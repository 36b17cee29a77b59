#include "titan/kernels/cpu/grouped_gemm.h"

#include <vector>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

namespace {

// Runs gemm_of(g, row_start) for every group. As gemm_strided_batched decides: small GEMMs go one
// group per thread, single-threaded BLAS each; large ones one after another, BLAS threading each.
template <typename F>
void for_each_group(const int64_t* group_rows, int64_t groups, int64_t flops_per_row, const F& gemm_of) {
  std::vector<int64_t> start(static_cast<size_t>(groups) + 1, 0);
  for (int64_t g = 0; g < groups; ++g) start[g + 1] = start[g] + group_rows[g];
  const int64_t mean_flops = groups > 0 ? start[groups] / groups * flops_per_row : 0;
  auto run = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) gemm_of(g, start[g]);
  };
  if (groups > 1 && mean_flops < 64 * 64 * 64)
    parallel_for(0, groups, 1, run);
  else
    run(0, groups);
}

}  // namespace

template <typename T>
void grouped_gemm(const int64_t* group_rows, int64_t groups, int64_t n, int64_t k, const T* x, const T* w,
                  bool trans_w, T* y, bool accumulate) {
  for_each_group(group_rows, groups, n * k, [&](int64_t g, int64_t row) {
    gemm<T>(false, trans_w, group_rows[g], n, k, T(1), x + row * k, k, w + g * n * k, trans_w ? k : n,
            accumulate ? T(1) : T(0), y + row * n, n);
  });
}

template <typename T>
void grouped_gemm_tn(const int64_t* group_rows, int64_t groups, int64_t m, int64_t n, const T* a, const T* b,
                     T* dw) {
  for_each_group(group_rows, groups, m * n, [&](int64_t g, int64_t row) {
    // k = 0 (an empty group) makes gemm write zeros.
    gemm<T>(true, false, m, n, group_rows[g], T(1), a + row * m, m, b + row * n, n, T(0), dw + g * m * n, n);
  });
}

template void grouped_gemm<float>(const int64_t*, int64_t, int64_t, int64_t, const float*, const float*, bool,
                                  float*, bool);
template void grouped_gemm<double>(const int64_t*, int64_t, int64_t, int64_t, const double*, const double*,
                                   bool, double*, bool);
template void grouped_gemm_tn<float>(const int64_t*, int64_t, int64_t, int64_t, const float*, const float*,
                                     float*);
template void grouped_gemm_tn<double>(const int64_t*, int64_t, int64_t, int64_t, const double*, const double*,
                                      double*);

}  // namespace titan::kernels::cpu
