#include "titan/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/trace.h"

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
void call_gemv(bool trans, int64_t rows, int64_t cols, float alpha, const float* a, int64_t lda,
               const float* x, int64_t incx, float beta, float* y, int64_t incy) {
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), alpha, a, static_cast<blasint>(lda), x, static_cast<blasint>(incx),
              beta, y, static_cast<blasint>(incy));
}
void call_gemv(bool trans, int64_t rows, int64_t cols, double alpha, const double* a, int64_t lda,
               const double* x, int64_t incx, double beta, double* y, int64_t incy) {
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
              static_cast<blasint>(cols), alpha, a, static_cast<blasint>(lda), x, static_cast<blasint>(incx),
              beta, y, static_cast<blasint>(incy));
}

// y = alpha * op(A) x + beta * y, A [rows, cols] row-major. beta = 0 must overwrite y whatever it
// holds (fresh memory may hold NaN); not every OpenBLAS version clears it rather than scaling it.
template <typename T>
void gemv(bool trans, int64_t rows, int64_t cols, T alpha, const T* a, int64_t lda, const T* x, int64_t incx,
          T beta, T* y, int64_t incy) {
  if (beta == T(0))
    for (int64_t i = 0, n = trans ? cols : rows; i < n; ++i) y[i * incy] = T(0);
  call_gemv(trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy);
}
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  trace::Span span(sizeof(T) == 4 ? "sgemm" : "dgemm", "gemm");
  span.arg("M", m).arg("N", n).arg("K", k).arg("flops", 2 * m * n * k);
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
  // One row or one column is a matrix-vector product. GEMM would pack the whole matrix for it
  // (decoding one token at a time spent most of its time packing weights); GEMV reads it once.
  if (m == 1) {  // c[0, :] = alpha * op(B)^T a[0, :] + beta * c[0, :]
    gemv<T>(!tb, tb ? n : k, tb ? k : n, alpha, b, ldb, a, ta ? lda : 1, beta, c, 1);
  } else if (n == 1) {  // c[:, 0] = alpha * op(A) b[:, 0] + beta * c[:, 0]
    gemv<T>(ta, ta ? k : m, ta ? m : k, alpha, a, lda, b, tb ? 1 : ldb, beta, c, ldc);
  } else {
    call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, gemm_acc_t<T> alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, gemm_acc_t<T> beta, gemm_acc_t<T>* c, int64_t ldc, Varying varying) {
  if constexpr (std::is_same_v<T, bf16>)
    onednn_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, varying);
  else
    blas_gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm_concurrent(std::span<const GemmCall<T>> calls, const std::vector<bool>& wanted) {
  const auto n = static_cast<int64_t>(calls.size());
  auto run = [&](int64_t i) {
    const GemmCall<T>& c = calls[i];
    gemm<T>(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, c.a, c.lda, c.b, c.ldb, c.beta, c.c, c.ldc,
            c.varying);
  };
  std::vector<int64_t> picked;
  int64_t multiply_adds = 0, picked_adds = 0;
  for (int64_t i = 0; i < n; ++i) {
    const GemmCall<T>& c = calls[i];
    multiply_adds += c.m * c.n * c.k;
    if (!wanted[i]) continue;
    picked.push_back(i);
    picked_adds += c.m * c.n * c.k;
  }
  const bool small = n > 0 && multiply_adds / n < 64 * 64 * 64;
  const int threads = omp_get_max_threads();
  if (n < 2 || threads < 2 || omp_in_parallel() || (threads > n && !small)) {
    for (int64_t i : picked) run(i);
    return;
  }
  trace::Span span("gemms side by side", "gemm");
  span.arg("calls", static_cast<int64_t>(picked.size())).arg("flops", 2 * picked_adds);
  // OpenBLAS's OpenMP build, and oneDNN's, run single-threaded inside a parallel region (even a lone
  // call, its team's other threads idle). Dynamic: the calls may differ in size (experts get
  // different numbers of tokens).
  const auto count = static_cast<int64_t>(picked.size());
#pragma omp parallel for num_threads(static_cast <int>(std::min <int64_t>(threads, n))) schedule(dynamic, 1)
  for (int64_t j = 0; j < count; ++j) run(picked[j]);
}

template <typename T>
void gemm_concurrent(std::span<const GemmCall<T>> calls) {
  gemm_concurrent(calls, std::vector<bool>(calls.size(), true));
}

template <typename T>
void gemm_strided_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, gemm_acc_t<T> alpha, const T* a,
                          int64_t lda, int64_t sa, const T* b, int64_t ldb, int64_t sb, gemm_acc_t<T> beta,
                          gemm_acc_t<T>* c, int64_t ldc, int64_t sc, int64_t batch) {
  std::vector<GemmCall<T>> calls;
  calls.reserve(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i)
    calls.push_back({ta, tb, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc});
  gemm_concurrent<T>(calls);
}

#define TITAN_GEMM_INSTANTIATE(T)                                                                          \
  template void gemm_concurrent<T>(std::span<const GemmCall<T>>);                                          \
  template void gemm_concurrent<T>(std::span<const GemmCall<T>>, const std::vector<bool>&);                \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, gemm_acc_t<T>, const T*, int64_t, const T*, \
                        int64_t, gemm_acc_t<T>, gemm_acc_t<T>*, int64_t, Varying);                         \
  template void gemm_strided_batched<T>(bool, bool, int64_t, int64_t, int64_t, gemm_acc_t<T>, const T*,    \
                                        int64_t, int64_t, const T*, int64_t, int64_t, gemm_acc_t<T>,       \
                                        gemm_acc_t<T>*, int64_t, int64_t, int64_t);
TITAN_GEMM_INSTANTIATE(float)
TITAN_GEMM_INSTANTIATE(double)
TITAN_GEMM_INSTANTIATE(bf16)

}  // namespace titan::kernels::cpu
