#pragma once
// Matrix multiply through cblas (OpenBLAS, OpenMP build). Row-major throughout:
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C
// where op(X) is X or its transpose; lda/ldb/ldc are row strides in elements.
#include <cstdint>

namespace titan::kernels::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// `batch` independent GEMMs whose operands sit at fixed element strides from one another
// (stride 0 broadcasts an operand across the batch).
template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                          const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                          int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace titan::kernels::cpu
