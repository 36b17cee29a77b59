// titan's programs run on tcmalloc (cmake/dependencies.cmake): malloc resolves to it for the whole
// process, the PJRT plugin included, and a large block freed and asked for again comes back
// without the kernel zeroing its pages a second time, which is what graph mode's per-run scratch
// buffer needs. Sanitizer builds keep the sanitizer's malloc and skip.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "titan/core/process_malloc.h"

namespace titan {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Writes every byte of a block, in a way the compiler cannot drop with the block.
void touch(void* p, size_t bytes, int value) {
  std::memset(p, value, bytes);
  asm volatile("" : : "r"(p) : "memory");
}

TEST(ProcessMalloc, ProgramsRunOnTcmalloc) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build: the sanitizer's malloc";
  EXPECT_NE(process_malloc().find("tcmalloc"), std::string::npos) << process_malloc();
}

// 256 MiB, the size of the scratch buffers that glibc maps afresh for every run: the second
// allocation reuses the first one's pages. glibc faults them all in again: 65,537 faults here, 640
// with its huge-page tunable (GLIBC_TUNABLES=glibc.malloc.hugetlb=1); tcmalloc none.
TEST(ProcessMalloc, AFreedLargeBlockComesBackWithoutPageFaults) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build: the sanitizer's malloc";
  constexpr size_t kBytes = size_t{256} << 20;
  void* first = std::malloc(kBytes);
  ASSERT_NE(first, nullptr);
  touch(first, kBytes, 1);
  std::free(first);
  const long before = minor_faults();
  void* second = std::malloc(kBytes);
  ASSERT_NE(second, nullptr);
  touch(second, kBytes, 2);
  const long faults = minor_faults() - before;
  std::free(second);
  EXPECT_LT(faults, 64) << "a freed 256 MiB block took " << faults << " page faults to use again under "
                          << process_malloc();
}

}  // namespace
}  // namespace titan
