#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "titan/kernels/cpu/blas_kernels.h"

namespace titan {
namespace {

using kernels::cpu::CpuVectorIsa;
using kernels::cpu::faster_blas_coretype;

constexpr CpuVectorIsa kIntelAvx512{.avx2_fma = true, .avx512 = true, .intel = true};
constexpr CpuVectorIsa kAmdAvx512{.avx2_fma = true, .avx512 = true, .intel = false};
constexpr CpuVectorIsa kAvx2{.avx2_fma = true, .avx512 = false, .intel = true};
constexpr CpuVectorIsa kSse{};

TEST(BlasKernels, KernelsFromBeforeAvx2OnANewerCpuGetTheCpusSet) {
  EXPECT_EQ(faster_blas_coretype("Prescott", kIntelAvx512), "SkylakeX");
  EXPECT_EQ(faster_blas_coretype("PRESCOTT", kIntelAvx512), "SkylakeX");
  EXPECT_EQ(faster_blas_coretype("Nehalem", kAvx2), "Haswell");
  EXPECT_EQ(faster_blas_coretype("Sandybridge", kAvx2), "Haswell");
  // SkylakeX's kernels are proposed for Intel's CPUs only; AVX2's run on any.
  EXPECT_EQ(faster_blas_coretype("Prescott", kAmdAvx512), "Haswell");
}

TEST(BlasKernels, KernelSetsOfAvx2AndLaterAreLeftAsChosen) {
  for (const char* chosen : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen"})
    EXPECT_EQ(faster_blas_coretype(chosen, kIntelAvx512), "") << chosen;
}

TEST(BlasKernels, OldKernelsOnACpuWithoutAvx2AreRight) {
  EXPECT_EQ(faster_blas_coretype("Prescott", kSse), "");
  EXPECT_EQ(faster_blas_coretype("Sandybridge", kSse), "");
}

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(BlasKernels, WarningNamesTheVariableAndTheFasterSetOnlyWhenThereIsOne) {
  const std::string faster =
      faster_blas_coretype(kernels::cpu::blas_corename(), kernels::cpu::host_vector_isa());
  {
    ScopedEnv unset("OPENBLAS_CORETYPE", nullptr);
    const std::string warning = kernels::cpu::blas_kernel_warning();
    if (faster.empty()) {
      EXPECT_EQ(warning, "");
    } else {
      EXPECT_NE(warning.find("OPENBLAS_CORETYPE=" + faster), std::string::npos) << warning;
      EXPECT_NE(warning.find(kernels::cpu::blas_corename()), std::string::npos) << warning;
    }
  }
  // A kernel set given in the environment is the user's or the platform's choice.
  ScopedEnv given("OPENBLAS_CORETYPE", "Prescott");
  EXPECT_EQ(kernels::cpu::blas_kernel_warning(), "");
}

}  // namespace
}  // namespace titan
