#include "titan/kernels/cpu/conv2d.h"

#include <algorithm>
#include <vector>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

namespace {

// Below this many elements per task, waking threads costs more than it saves.
constexpr int64_t kGrainElems = 16384;

int64_t grain(int64_t elems_per_item) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, elems_per_item));
}

// One image's column matrix [c * kh * kw, oh * ow]: row (ci, ki, kj) holds, for every output
// position, the input pixel that tap (ki, kj) of channel ci sees there (0 in the padding).
template <typename T>
void im2col(const Conv2dGeometry& g, const T* x, T* col) {
  const int64_t oh = g.oh(), ow = g.ow(), taps = g.kh * g.kw;
  parallel_for(0, g.c * taps, grain(oh * ow), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t ci = r / taps, ki = r % taps / g.kw, kj = r % g.kw;
      const T* plane = x + ci * g.h * g.w;
      T* out = col + r * oh * ow;
      for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t iy = oy * g.stride - g.pad_top + ki;
        T* dst = out + oy * ow;
        if (iy < 0 || iy >= g.h) {
          std::fill(dst, dst + ow, T(0));
          continue;
        }
        const T* src = plane + iy * g.w;
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t ix = ox * g.stride - g.pad_left + kj;
          dst[ox] = ix >= 0 && ix < g.w ? src[ix] : T(0);
        }
      }
    }
  });
}

// The adjoint of im2col: adds every column entry back onto the pixel it was read from. Threads
// split the channels, so no two write the same pixel.
template <typename T>
void col2im(const Conv2dGeometry& g, const T* col, T* dx) {
  const int64_t oh = g.oh(), ow = g.ow(), taps = g.kh * g.kw;
  parallel_for(0, g.c, grain(taps * oh * ow), [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci) {
      T* plane = dx + ci * g.h * g.w;
      std::fill(plane, plane + g.h * g.w, T(0));
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t ki = t / g.kw, kj = t % g.kw;
        const T* in = col + (ci * taps + t) * oh * ow;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * g.stride - g.pad_top + ki;
          if (iy < 0 || iy >= g.h) continue;
          T* dst = plane + iy * g.w;
          const T* src = in + oy * ow;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t ix = ox * g.stride - g.pad_left + kj;
            if (ix >= 0 && ix < g.w) dst[ix] += src[ox];
          }
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void conv2d_fwd_im2col(const Conv2dGeometry& g, const T* x, const T* weight, const T* bias, T* y) {
  const int64_t spatial = g.oh() * g.ow(), rows = g.c * g.kh * g.kw;
  std::vector<T> col(g.pointwise() ? 0 : static_cast<size_t>(rows * spatial));
  for (int64_t b = 0; b < g.n; ++b) {
    const T* xb = x + b * g.c * g.h * g.w;
    T* yb = y + b * g.o * spatial;
    if (!g.pointwise()) im2col(g, xb, col.data());
    gemm<T>(false, false, g.o, spatial, rows, T(1), weight, rows, g.pointwise() ? xb : col.data(), spatial,
            T(0), yb, spatial);
    if (bias == nullptr) continue;
    parallel_for(0, g.o, grain(spatial), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t s = 0; s < spatial; ++s) yb[o * spatial + s] += bias[o];
    });
  }
}

template <typename T>
void conv2d_bwd_data_im2col(const Conv2dGeometry& g, const T* dy, const T* weight, T* dx) {
  const int64_t spatial = g.oh() * g.ow(), rows = g.c * g.kh * g.kw;
  std::vector<T> col(g.pointwise() ? 0 : static_cast<size_t>(rows * spatial));
  for (int64_t b = 0; b < g.n; ++b) {
    const T* dyb = dy + b * g.o * spatial;
    T* dxb = dx + b * g.c * g.h * g.w;
    gemm<T>(true, false, rows, spatial, g.o, T(1), weight, rows, dyb, spatial, T(0),
            g.pointwise() ? dxb : col.data(), spatial);
    if (!g.pointwise()) col2im(g, col.data(), dxb);
  }
}

template <typename T>
void conv2d_bwd_weight_im2col(const Conv2dGeometry& g, const T* dy, const T* x, T* dweight, T* dbias) {
  const int64_t spatial = g.oh() * g.ow(), rows = g.c * g.kh * g.kw;
  if (dweight != nullptr && g.n == 0) std::fill(dweight, dweight + g.o * rows, T(0));
  if (dweight != nullptr) {
    std::vector<T> col(g.pointwise() ? 0 : static_cast<size_t>(rows * spatial));
    for (int64_t b = 0; b < g.n; ++b) {
      const T* xb = x + b * g.c * g.h * g.w;
      if (!g.pointwise()) im2col(g, xb, col.data());
      gemm<T>(false, true, g.o, rows, spatial, T(1), dy + b * g.o * spatial, spatial,
              g.pointwise() ? xb : col.data(), spatial, b == 0 ? T(0) : T(1), dweight, rows);
    }
  }
  if (dbias == nullptr) return;
  parallel_for(0, g.o, grain(g.n * spatial), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      T s = 0;
      for (int64_t b = 0; b < g.n; ++b) {
        const T* row = dy + (b * g.o + o) * spatial;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < spatial; ++i) s += row[i];
      }
      dbias[o] = s;
    }
  });
}

#define TITAN_CONV2D_IM2COL(T)                                                                 \
  template void conv2d_fwd_im2col<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*); \
  template void conv2d_bwd_data_im2col<T>(const Conv2dGeometry&, const T*, const T*, T*);      \
  template void conv2d_bwd_weight_im2col<T>(const Conv2dGeometry&, const T*, const T*, T*, T*);
TITAN_CONV2D_IM2COL(float)
TITAN_CONV2D_IM2COL(double)
#undef TITAN_CONV2D_IM2COL

}  // namespace titan::kernels::cpu
