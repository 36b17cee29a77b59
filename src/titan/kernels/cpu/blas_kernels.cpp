#include "titan/kernels/cpu/blas_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

namespace titan::kernels::cpu {

CpuVectorIsa host_vector_isa() {
  CpuVectorIsa isa;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
  isa.intel = __builtin_cpu_is("intel");
#endif
  return isa;
}

std::string blas_corename() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string faster_blas_coretype(const std::string& corename, const CpuVectorIsa& isa) {
  // OpenBLAS's x86-64 kernel sets from before AVX2, as openblas_get_corename() spells them.
  static constexpr std::array<std::string_view, 9> kOlderThanAvx2 = {
      "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge", "Nano", "Generic"};
  const bool older = std::any_of(kOlderThanAvx2.begin(), kOlderThanAvx2.end(), [&](std::string_view n) {
    return corename.size() == n.size() &&
           std::equal(n.begin(), n.end(), corename.begin(),
                      [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  });
  if (!older || !isa.avx2_fma) return "";
  return isa.avx512 && isa.intel ? "SkylakeX" : "Haswell";
}

std::string blas_kernel_warning() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string corename = blas_corename();
  const std::string faster = faster_blas_coretype(corename, host_vector_isa());
  if (faster.empty()) return "";
  return "OpenBLAS runs its " + corename +
         " kernels, older than this CPU (this OpenBLAS does not know its model), so every GEMM runs "
         "several times slower than it could; run with OPENBLAS_CORETYPE=" +
         faster + " in the environment";
}

}  // namespace titan::kernels::cpu
