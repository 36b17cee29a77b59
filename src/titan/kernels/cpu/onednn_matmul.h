#pragma once
// bf16 matrix products through oneDNN's matmul primitive, which runs them on the CPU's bf16
// instructions (AVX512-BF16's dot products, AMX's tiles) with float32 accumulation. OpenBLAS has
// no bf16 GEMM and MKL's cblas_gemm_bf16bf16f32 used neither on AMD Zen 4: on 2 Zen 4 cores over
// the GEMM shapes of the bench's M-sized Llama step, oneDNN ran 323-363 GFLOP/s, MKL 118, and
// OpenBLAS float32 181 (bench_gemm prints the comparison on the machine at hand).
#include <cstdint>
#include <string>

#include "titan/core/dtype.h"

namespace titan::kernels::cpu {

// C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C, row-major as gemm's arguments are; A and
// B bf16, C float32. A primitive is made once per shape and layout and cached (making one costs
// 0.2-0.9 ms). `varying` makes one primitive serve every m (or k) of the same other dimensions
// and layout, for products whose token count changes from call to call (the expert groups of a
// mixture-of-experts layer) and would otherwise make a primitive per call. Safe to call from
// several threads at once; inside an OpenMP parallel region it runs on the calling thread.
enum class Varying : uint8_t { none, m, k };
void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a,
                      int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc,
                      Varying varying = Varying::none);

// oneDNN's name for the implementation that runs onednn_gemm_bf16 on operands of these sizes and
// layouts, stored without gaps ("brg:avx512_core_amx", "gemm:jit"), or "" where the CPU has no
// bf16 instructions: benchmarks print it, since one CPU's implementation may run several times
// slower than another's on the same instructions.
std::string onednn_gemm_bf16_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha = 1.0f);

// The bf16 instructions oneDNN uses on this CPU ("AMX-BF16", "AVX512-BF16"), or "" when the CPU
// (or ONEDNN_MAX_CPU_ISA, oneDNN's own limit, read from the environment when it starts) allows
// neither: oneDNN then has no bf16 primitive (onednn_gemm_bf16 refuses, naming why), and titan
// refuses bf16 training.
std::string onednn_bf16_isa();

// oneDNN's version, "3.2.0".
std::string onednn_version();

}  // namespace titan::kernels::cpu
