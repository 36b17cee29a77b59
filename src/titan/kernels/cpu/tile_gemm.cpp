#include "titan/kernels/cpu/tile_gemm.h"

#include <algorithm>
#include <cstring>

#include "titan/core/error.h"

namespace titan::kernels::cpu {

namespace {

// GCC's generic vectors of kTileVectorBytes: AVX-512 or AVX2 registers under -march=native, SSE
// pairs without. This file is built with -ffp-contract=fast (CMakeLists.txt), so `acc += a * b`
// is one FMA. (An alias template cannot carry the attribute: GCC drops it on a dependent type.)
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(kTileVectorBytes)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(kTileVectorBytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
constexpr int64_t kLanes = kTileVectorBytes / static_cast<int64_t>(sizeof(T));

template <typename T>
Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// C[R, cols] (+)= alpha * A[R, k] * (one packed panel [k][2 lanes]); cols <= the panel width.
// The unroll pragmas keep the accumulators in registers: GCC otherwise spills the arrays to the
// stack on every step of p.
template <typename T, int R>
void block(int64_t k, const T* a, int64_t sa_i, int64_t sa_p, const T* b, T alpha, bool accumulate, T* c,
           int64_t ldc, int64_t cols) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  V lo[R], hi[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = V{};
  for (int64_t p = 0; p < k; ++p) {
    const V b0 = load(b + p * 2 * L), b1 = load(b + p * 2 * L + L);
    const T* ap = a + p * sa_p;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const V ai = ap[i * sa_i] - V{};  // a broadcast: x - 0 folds to x, x + 0 does not (-0)
      lo[i] += ai * b0;
      hi[i] += ai * b1;
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    T* ci = c + i * ldc;
    V r0 = lo[i] * alpha, r1 = hi[i] * alpha;
    if (cols == 2 * L) {
      if (accumulate) {
        r0 += load(ci);
        r1 += load(ci + L);
      }
      std::memcpy(ci, &r0, sizeof(r0));
      std::memcpy(ci + L, &r1, sizeof(r1));
      continue;
    }
    T out[2 * L];
    std::memcpy(out, &r0, sizeof(r0));
    std::memcpy(out + L, &r1, sizeof(r1));
    for (int64_t j = 0; j < cols; ++j) ci[j] = accumulate ? ci[j] + out[j] : out[j];
  }
}

template <typename T, int R>
void rows(int64_t k, const T* a, int64_t sa_i, int64_t sa_p, const T* b, T alpha, bool accumulate, T* c,
          int64_t ldc, int64_t cols, int64_t r) {
  if constexpr (R > 0) {
    if (r == R) return block<T, R>(k, a, sa_i, sa_p, b, alpha, accumulate, c, ldc, cols);
    rows<T, R - 1>(k, a, sa_i, sa_p, b, alpha, accumulate, c, ldc, cols, r);
  }
}

}  // namespace

template <typename T>
void pack_tile_b(int64_t k, int64_t n, Strided<T> b, T* packed) {
  constexpr int64_t W = kTilePanel<T>;
  for (int64_t j0 = 0; j0 < n; j0 += W, packed += k * W) {
    const int64_t w = std::min(W, n - j0);
    for (int64_t p = 0; p < k; ++p) {
      T* dst = packed + p * W;
      const T* src = b.data + p * b.row_stride + j0 * b.col_stride;
      for (int64_t j = 0; j < w; ++j) dst[j] = src[j * b.col_stride];
      std::fill(dst + w, dst + W, T(0));
    }
  }
}

template <typename T>
void tile_gemm(int64_t m, int64_t n, int64_t k, T alpha, Strided<T> a, const T* b_packed, bool accumulate,
               T* c, int64_t ldc, std::span<const TileBand> bands, BandOf band_of) {
  constexpr int64_t W = kTilePanel<T>;
  static_assert(W == 2 * kLanes<T>);
  const int64_t blocks = tile_row_blocks(m);
  TITAN_CHECK(bands.empty() || static_cast<int64_t>(bands.size()) >= blocks, "tile_gemm: ", bands.size(),
              " bands for ", m, " rows of C; pass one per ", kTileRows, " rows, or none");
  for (int64_t j0 = 0; j0 < n; j0 += W) {
    const int64_t cols = std::min(W, n - j0);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      int64_t p0 = 0, p1 = k;
      if (!bands.empty()) {
        const TileBand& band = bands[blk];
        if (band_of == BandOf::terms) {
          p0 = std::clamp<int64_t>(band.begin, 0, k);
          p1 = std::clamp<int64_t>(band.end, p0, k);
          if (p0 == p1) p0 = p1 = 0;  // no terms: keep the operands' pointers within them
        } else if (band.end <= band.begin || j0 + W <= band.begin || j0 >= band.end) {
          continue;
        }
      }
      // Terms from p0 on: A's columns and each panel's rows (panels hold W columns a row).
      const int64_t i0 = blk * kTileRows;
      rows<T, kTileRows>(p1 - p0, a.data + i0 * a.row_stride + p0 * a.col_stride, a.row_stride, a.col_stride,
                         b_packed + j0 * k + p0 * W, alpha, accumulate, c + i0 * ldc + j0, ldc, cols,
                         std::min(kTileRows, m - i0));
    }
  }
}

#define TITAN_TILE_GEMM(T)                                                                          \
  template void pack_tile_b<T>(int64_t, int64_t, Strided<T>, T*);                                   \
  template void tile_gemm<T>(int64_t, int64_t, int64_t, T, Strided<T>, const T*, bool, T*, int64_t, \
                             std::span<const TileBand>, BandOf);
TITAN_TILE_GEMM(float)
TITAN_TILE_GEMM(double)
#undef TITAN_TILE_GEMM

}  // namespace titan::kernels::cpu
