#pragma once
// Which of OpenBLAS's kernel sets runs the GEMMs, and whether the CPU could run a faster one.
// OpenBLAS picks its kernels once, when it loads, from the CPU's model number. A release older
// than the CPU does not know that number and falls back to its oldest x86-64 kernels (Prescott,
// SSE3): Debian 12's OpenBLAS 0.3.21 does so on Emerald Rapids, where SGEMM 2048^3 on 2 cores
// ran at 34 GFLOP/s with them and at 160-300 with its SkylakeX kernels. Only OPENBLAS_CORETYPE in
// the environment, read when the library loads, changes the choice; titan says so rather than
// overriding a choice the platform may have made on purpose.
#include <string>

namespace titan::kernels::cpu {

// The vector instructions that decide which kernel sets a CPU runs.
struct CpuVectorIsa {
  bool avx2_fma = false;  // Haswell's kernels
  bool avx512 = false;    // F, CD, DQ, BW and VL: SkylakeX's kernels
  bool intel = false;     // SkylakeX's kernels are only proposed for Intel's CPUs
};

CpuVectorIsa host_vector_isa();

// The kernel set OpenBLAS runs, as openblas_get_corename() names it (Haswell, SkylakeX, ...).
std::string blas_corename();

// The OPENBLAS_CORETYPE to run instead of `corename`, a kernel set from before AVX2 (Prescott,
// Core2, Nehalem, Sandybridge, ...), on a CPU with `isa`; "" when `corename` is not older than
// the CPU. Kernel sets of AVX2 and later are taken as chosen on purpose.
std::string faster_blas_coretype(const std::string& corename, const CpuVectorIsa& isa);

// A warning for the start-up log when OpenBLAS runs a kernel set older than this CPU and
// OPENBLAS_CORETYPE is unset, naming the variable and the value to set; "" otherwise.
std::string blas_kernel_warning();

}  // namespace titan::kernels::cpu
