#include "titan/kernels/cpu/upsample.h"

#include <algorithm>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

template <typename T>
void upsample_nearest_fwd(const T* x, T* y, int64_t planes, int64_t h, int64_t w, int64_t factor) {
  const int64_t ow = w * factor;
  // Each input row is widened once, then copied to the other factor - 1 output rows.
  parallel_for(0, planes * h, std::max<int64_t>(1, 4096 / ow), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* src = x + r * w;
      T* dst = y + r * factor * ow;
      for (int64_t j = 0; j < w; ++j)
        for (int64_t f = 0; f < factor; ++f) dst[j * factor + f] = src[j];
      for (int64_t f = 1; f < factor; ++f) std::copy(dst, dst + ow, dst + f * ow);
    }
  });
}

template <typename T>
void upsample_nearest_bwd(const T* dy, T* dx, int64_t planes, int64_t h, int64_t w, int64_t factor) {
  const int64_t ow = w * factor;
  parallel_for(0, planes * h, std::max<int64_t>(1, 4096 / ow), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* src = dy + r * factor * ow;
      T* dst = dx + r * w;
      for (int64_t j = 0; j < w; ++j) {
        T s = 0;
        for (int64_t f = 0; f < factor; ++f)
          for (int64_t e = 0; e < factor; ++e) s += src[f * ow + j * factor + e];
        dst[j] = s;
      }
    }
  });
}

#define TITAN_UPSAMPLE(T)                                                                  \
  template void upsample_nearest_fwd<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t); \
  template void upsample_nearest_bwd<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t);
TITAN_UPSAMPLE(float)
TITAN_UPSAMPLE(double)
#undef TITAN_UPSAMPLE

}  // namespace titan::kernels::cpu
