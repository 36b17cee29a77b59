#pragma once
// Writing an output far larger than the last-level cache costs a read of every line before it is
// written (write-allocate), so a kernel that reads one buffer and writes another moves three
// bytes per two counted. Non-temporal stores write around the caches and skip that read. They
// only pay when the written lines would have been evicted before anyone read them anyway; for an
// output that fits in cache they make the next reader miss.
#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace titan::kernels::cpu {

// Output size from which a kernel streams its stores: twice this machine class's L3 (32 MiB).
inline constexpr int64_t kStreamingBytes = int64_t{64} << 20;

inline bool wants_streaming(int64_t elements, int64_t element_bytes) {
  return elements * element_bytes >= kStreamingBytes;
}

#if defined(__AVX__)
namespace detail {

// Copies n elements from an L1 chunk to dst (32-byte aligned) with non-temporal stores.
template <typename T>
inline void stream_copy_aligned(T* dst, const T* src, int64_t n) {
  constexpr int64_t kLanes = 32 / sizeof(T);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if constexpr (sizeof(T) == 4)
      _mm256_stream_ps(reinterpret_cast<float*>(dst + i), _mm256_loadu_ps(reinterpret_cast<const float*>(src + i)));
    else
      _mm256_stream_pd(reinterpret_cast<double*>(dst + i),
                       _mm256_loadu_pd(reinterpret_cast<const double*>(src + i)));
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(n - i) * sizeof(T));
}

}  // namespace detail
#endif

// Writes dst[0, n) through fill(out, begin, len), which must set out[0, len) to the values of
// elements [begin, begin + len). Without `stream`, fill writes dst directly. With it, fill writes
// a small chunk that stays in L1 and the chunk goes to dst by non-temporal stores; the fence makes
// them visible before the caller's threads join. fill may read dst's own source when that source
// is dst itself (in-place): element i is read before it is written in both modes.
template <typename T, typename Fill>
void write_elements(T* dst, int64_t n, bool stream, const Fill& fill) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "write_elements: f32 or f64 elements");
#if defined(__AVX__)
  if (stream) {
    constexpr int64_t kChunk = 1024;
    alignas(64) T chunk[kChunk];
    const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst) % 32);
    int64_t head = misaligned == 0 ? 0 : std::min<int64_t>(n, (32 - misaligned) / sizeof(T));
    if (misaligned % sizeof(T) != 0) head = n;  // not element-aligned: nothing to stream
    if (head > 0) fill(dst, 0, head);
    for (int64_t b = head; b < n; b += kChunk) {
      const int64_t len = std::min(kChunk, n - b);
      fill(chunk, b, len);
      detail::stream_copy_aligned(dst + b, chunk, len);
    }
    _mm_sfence();
    return;
  }
#endif
  fill(dst, 0, n);
}

}  // namespace titan::kernels::cpu
