#pragma once
// Matrix multiply: float32 and float64 through cblas (OpenBLAS, OpenMP build), bf16 through
// oneDNN (onednn_matmul.h) with a float32 C. Row-major throughout:
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C
// where op(X) is X or its transpose; lda/ldb/ldc are row strides in elements.
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/kernels/cpu/onednn_matmul.h"

namespace titan::kernels::cpu {

// What a product of T operands is accumulated and written in: float32 for bf16, T otherwise.
template <typename T>
using gemm_acc_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, gemm_acc_t<T> alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, gemm_acc_t<T> beta, gemm_acc_t<T>* c, int64_t ldc,
          Varying varying = Varying::none);

// `batch` independent GEMMs whose operands sit at fixed element strides from one another
// (stride 0 broadcasts an operand across the batch).
template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, gemm_acc_t<T> alpha,
                          const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                          int64_t stride_b, gemm_acc_t<T> beta, gemm_acc_t<T>* c, int64_t ldc,
                          int64_t stride_c, int64_t batch);

// One GEMM's arguments, as gemm takes them.
template <typename T>
struct GemmCall {
  bool trans_a, trans_b;
  int64_t m, n, k;
  gemm_acc_t<T> alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  gemm_acc_t<T> beta;
  gemm_acc_t<T>* c;
  int64_t ldc;
  Varying varying = Varying::none;
};

// Independent GEMMs (a linear layer's input and weight gradients, the experts of a MoE layer,
// the heads of a batched matmul). With at least as many calls as threads, or calls so small that
// BLAS threading costs more than it gains, they run side by side, each single-threaded on a
// thread of its own: inside one threaded call OpenBLAS's threads wait on each other for every
// shared packed panel, and side by side nothing waits until the end. On 2 cores the GEMMs of a
// Llama training step (dim 512, 2048 tokens; forward in turn, backward pairs side by side) ran
// 0-6% faster, and the experts of a MoE layer (8 experts, 4096 tokens, dim 512) 12-17%.
// Otherwise they run one after another, BLAS threading each. The choice depends on the shapes
// and the thread count alone, so a run repeats bit for bit; OpenBLAS blocks the sum over k
// differently with and without threads, so the low bits differ from calls made in turn.
template <typename T>
void gemm_concurrent(std::span<const GemmCall<T>> calls);

// Only the calls marked in `wanted`, each run exactly as gemm_concurrent(calls) would run it (side
// by side or BLAS-threaded, chosen from all of them), so with the same bits: a layer's input and
// weight gradients asked for apart (a split backward, autograd/engine.h) come out as when asked for
// together. The pointers of the calls left out are not read.
template <typename T>
void gemm_concurrent(std::span<const GemmCall<T>> calls, const std::vector<bool>& wanted);

}  // namespace titan::kernels::cpu
