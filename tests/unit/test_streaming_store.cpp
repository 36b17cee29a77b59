#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "titan/kernels/cpu/streaming_store.h"

namespace titan {
namespace {

using kernels::cpu::write_elements;

// Every start alignment and length around the chunk size: the scalar head up to a 32-byte
// boundary, whole chunks, a ragged last chunk. Streamed and direct writes give the same values,
// each element from fill exactly once, and nothing outside [0, n) is touched.
template <typename T>
void check_streamed_equals_direct() {
  for (int64_t offset = 0; offset < 8; ++offset) {
    for (int64_t n : {0, 1, 3, 7, 8, 9, 1023, 1024, 1025, 3000}) {
      std::vector<T> streamed(static_cast<size_t>(n + 16), T(-1)), direct(streamed);
      auto fill = [](std::vector<int>& calls) {
        return [&calls](T* out, int64_t b, int64_t len) {
          for (int64_t i = 0; i < len; ++i) {
            out[i] = static_cast<T>(3 * (b + i) + 1);
            ++calls[static_cast<size_t>(b + i)];
          }
        };
      };
      std::vector<int> calls_streamed(static_cast<size_t>(n), 0), calls_direct(calls_streamed);
      write_elements(streamed.data() + offset, n, true, fill(calls_streamed));
      write_elements(direct.data() + offset, n, false, fill(calls_direct));
      EXPECT_EQ(streamed, direct) << "offset " << offset << ", n " << n;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(calls_streamed[static_cast<size_t>(i)], 1) << "element " << i << " of " << n;
        ASSERT_EQ(direct[static_cast<size_t>(offset + i)], static_cast<T>(3 * i + 1));
      }
      for (int64_t i = 0; i < offset; ++i) ASSERT_EQ(streamed[static_cast<size_t>(i)], T(-1));
      for (int64_t i = offset + n; i < n + 16; ++i) ASSERT_EQ(streamed[static_cast<size_t>(i)], T(-1));
    }
  }
}

TEST(StreamingStore, F32StreamedWritesEqualDirectWrites) { check_streamed_equals_direct<float>(); }
TEST(StreamingStore, F64StreamedWritesEqualDirectWrites) { check_streamed_equals_direct<double>(); }

}  // namespace
}  // namespace titan
