#include "titan/kernels/cpu/rope.h"

#include <algorithm>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {

template <typename T, bool Interleaved, bool Transpose>
void rope_impl(const T* x, T* y, const float* cos, const float* sin, const RopeGeometry& g) {
  const int64_t half = g.rotary_dim / 2, token = g.heads * g.head_dim;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(token, 1));
  parallel_for(0, g.batch * g.seq, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = g.start_pos + t % g.seq;
      const float* c = cos + pos * half;
      const float* s = sin + pos * half;
      for (int64_t h = 0; h < g.heads; ++h) {
        const T* xr = x + t * token + h * g.head_dim;
        T* yr = y + t * token + h * g.head_dim;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const T ci = static_cast<T>(c[i]);
          const T si = Transpose ? -static_cast<T>(s[i]) : static_cast<T>(s[i]);
          const int64_t i0 = Interleaved ? 2 * i : i, i1 = Interleaved ? 2 * i + 1 : i + half;
          const T a = xr[i0], b = xr[i1];
          yr[i0] = a * ci - b * si;
          yr[i1] = b * ci + a * si;
        }
        std::copy(xr + g.rotary_dim, xr + g.head_dim, yr + g.rotary_dim);
      }
    }
  });
}

}  // namespace

template <typename T>
void rope(const T* x, T* y, const float* cos, const float* sin, const RopeGeometry& g, bool interleaved,
          bool transpose) {
  if (interleaved) {
    if (transpose)
      rope_impl<T, true, true>(x, y, cos, sin, g);
    else
      rope_impl<T, true, false>(x, y, cos, sin, g);
  } else {
    if (transpose)
      rope_impl<T, false, true>(x, y, cos, sin, g);
    else
      rope_impl<T, false, false>(x, y, cos, sin, g);
  }
}

template void rope<float>(const float*, float*, const float*, const float*, const RopeGeometry&, bool, bool);
template void rope<double>(const double*, double*, const float*, const float*, const RopeGeometry&, bool,
                           bool);

}  // namespace titan::kernels::cpu
