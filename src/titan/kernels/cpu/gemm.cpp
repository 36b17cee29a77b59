#include "titan/kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "titan/core/error.h"
#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {
void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
}  // namespace

template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS leaves C untouched when k == 0 only if beta == 1; make it exact
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  // BLAS insists on leading dimensions >= the row length even for one row/column.
  lda = std::max<int64_t>(lda, ta ? m : k);
  ldb = std::max<int64_t>(ldb, tb ? k : n);
  ldc = std::max<int64_t>(ldc, n);
  call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm_strided_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                          int64_t lda, int64_t sa, const T* b, int64_t ldb, int64_t sb, T beta, T* c,
                          int64_t ldc, int64_t sc, int64_t batch) {
  // Small matrices: one single-threaded BLAS call per thread beats BLAS threading each tiny call.
  // Large ones: let BLAS parallelise inside each call.
  bool small = m * n * k < 64 * 64 * 64;
  if (small && batch > 1) {
    parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        gemm(ta, tb, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i)
      gemm(ta, tb, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_strided_batched<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                          int64_t, int64_t, const float*, int64_t, int64_t, float,
                                          float*, int64_t, int64_t, int64_t);
template void gemm_strided_batched<double>(bool, bool, int64_t, int64_t, int64_t, double,
                                           const double*, int64_t, int64_t, const double*, int64_t,
                                           int64_t, double, double*, int64_t, int64_t, int64_t);

}  // namespace titan::kernels::cpu
