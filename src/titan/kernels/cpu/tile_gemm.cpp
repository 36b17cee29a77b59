#include "titan/kernels/cpu/tile_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

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

// One row of C's panel (+)= alpha * its two accumulators; cols <= the panel width.
template <typename T>
void store_row(Vec<T> lo, Vec<T> hi, T alpha, bool accumulate, T* ci, int64_t cols) {
  constexpr int64_t L = kLanes<T>;
  Vec<T> r0 = lo * alpha, r1 = hi * alpha;
  if (cols == 2 * L) {
    if (accumulate) {
      r0 += load(ci);
      r1 += load(ci + L);
    }
    std::memcpy(ci, &r0, sizeof(r0));
    std::memcpy(ci + L, &r1, sizeof(r1));
    return;
  }
  T out[2 * L];
  std::memcpy(out, &r0, sizeof(r0));
  std::memcpy(out + L, &r1, sizeof(r1));
  for (int64_t j = 0; j < cols; ++j) ci[j] = accumulate ? ci[j] + out[j] : out[j];
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
  for (int i = 0; i < R; ++i) store_row(lo[i], hi[i], alpha, accumulate, c + i * ldc, cols);
}

template <typename T, int R>
void rows(int64_t k, const T* a, int64_t sa_i, int64_t sa_p, const T* b, T alpha, bool accumulate, T* c,
          int64_t ldc, int64_t cols, int64_t r) {
  if constexpr (R > 0) {
    if (r == R) return block<T, R>(k, a, sa_i, sa_p, b, alpha, accumulate, c, ldc, cols);
    rows<T, R - 1>(k, a, sa_i, sa_p, b, alpha, accumulate, c, ldc, cols, r);
  }
}

// The terms [p0, p1) of k that a `terms` band names; none as [0, 0), which keeps the operands'
// pointers within them.
std::pair<int64_t, int64_t> band_terms(const TileBand& band, int64_t k) {
  const int64_t p0 = std::clamp<int64_t>(band.begin, 0, k), p1 = std::clamp<int64_t>(band.end, p0, k);
  return p0 == p1 ? std::pair<int64_t, int64_t>{0, 0} : std::pair{p0, p1};
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
          std::tie(p0, p1) = band_terms(band, k);
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

// ---- bf16 operands, float32 sums -----------------------------------------------------------------

namespace {

constexpr int64_t kPanelBf16 = kTilePanelBf16;

// A register block's terms as the kernel reads them: the pair q of row i at a + i * row + q *
// pair (bf16 elements), two adjacent bf16 whose first is term 2q; `tail`: one term past the
// pairs, alone (an odd k), whose neighbour in memory is not read.
struct PairsOfA {
  const bf16* a = nullptr;
  int64_t row = 0, pair = 0, pairs = 0;
  bool tail = false;
};

#ifdef __AVX512BF16__
static_assert(kPanelBf16 == 32, "two vectors of 16 float32 accumulators");

// A pair of A's terms, or one term and a zero, in every 32-bit lane.
__m512bh broadcast_pair(const bf16* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(w));
}
__m512bh broadcast_term(const bf16* p) {
  return (__m512bh)_mm512_set1_epi32(p->bits);
}

// C[R, cols] (+)= alpha * A[R, pairs] * (one packed panel [pairs][16 columns x 2][2 vectors]).
// dpbf16 adds a lane's two products into its sum, each rounded to float32 (the products of two
// bf16 are exact); it reads denormal bf16 as zero.
template <int R>
void block_bf16(const PairsOfA& a, const bf16* b, float alpha, bool accumulate, float* c, int64_t ldc,
                int64_t cols) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < a.pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * 2 * kPanelBf16);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * 2 * kPanelBf16 + kPanelBf16);
    const bf16* aq = a.a + q * a.pair;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512bh ai = broadcast_pair(aq + i * a.row);
      lo[i] = _mm512_dpbf16_ps(lo[i], ai, b0);
      hi[i] = _mm512_dpbf16_ps(hi[i], ai, b1);
    }
  }
  if (a.tail) {
    const bf16* bq = b + a.pairs * 2 * kPanelBf16;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bq), b1 = (__m512bh)_mm512_loadu_si512(bq + kPanelBf16);
    const bf16* aq = a.a + a.pairs * a.pair;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512bh ai = broadcast_term(aq + i * a.row);
      lo[i] = _mm512_dpbf16_ps(lo[i], ai, b0);
      hi[i] = _mm512_dpbf16_ps(hi[i], ai, b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
    store_row<float>(Vec<float>(lo[i]), Vec<float>(hi[i]), alpha, accumulate, c + i * ldc, cols);
}
#else
// Scalar, for CPUs without AVX512-BF16 (see tile_gemm.h): the same sums, in the same order.
template <int R>
void block_bf16(const PairsOfA& a, const bf16* b, float alpha, bool accumulate, float* c, int64_t ldc,
                int64_t cols) {
  for (int i = 0; i < R; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float sum = 0;
      for (int64_t q = 0; q <= a.pairs; ++q) {
        if (q == a.pairs && !a.tail) break;
        const bf16* aq = a.a + i * a.row + q * a.pair;
        const bf16* bq = b + q * 2 * kPanelBf16 + 2 * j;
        sum += static_cast<float>(aq[0]) * static_cast<float>(bq[0]);
        if (q < a.pairs) sum += static_cast<float>(aq[1]) * static_cast<float>(bq[1]);
      }
      float* cij = c + i * ldc + j;
      *cij = accumulate ? *cij + sum * alpha : sum * alpha;
    }
}
#endif

template <int R>
void rows_bf16(int64_t r, const PairsOfA& a, const bf16* b, float alpha, bool accumulate, float* c,
               int64_t ldc, int64_t cols) {
  if constexpr (R > 0) {
    if (r == R) return block_bf16<R>(a, b, alpha, accumulate, c, ldc, cols);
    rows_bf16<R - 1>(r, a, b, alpha, accumulate, c, ldc, cols);
  }
}

// Rows [0, r) and terms [0, k) of an A whose terms are not adjacent in memory (a transposed
// matrix), laid out as PairsOfA reads them: pair q of row i at out + (q * kTileRows + i) * 2, an
// odd k's last pair completed by a zero. Done once per register block, for all its panels.
void pack_a_pairs(Strided<bf16> a, int64_t r, int64_t k, bf16* out) {
#ifdef __AVX512BF16__
  if (a.row_stride == 1) {  // a transposed matrix: each term's r rows are adjacent
    const __mmask16 rows = static_cast<__mmask16>((1u << r) - 1);
    // Masked forms throughout: GCC 12 warns of the unmasked ones' undefined lanes.
    auto term = [&](int64_t p) {
      return _mm512_maskz_cvtepu16_epi32(rows, _mm256_maskz_loadu_epi16(rows, a.data + p * a.col_stride));
    };
    for (int64_t p = 0; p < k; p += 2) {
      const __m512i second =
          p + 1 < k ? _mm512_maskz_slli_epi32(rows, term(p + 1), 16) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(out + p * kTileRows, rows, _mm512_or_si512(term(p), second));
    }
    return;
  }
#endif
  for (int64_t p = 0; p < k; p += 2) {
    const bf16* t0 = a.data + p * a.col_stride;
    const bf16* t1 = t0 + a.col_stride;
    bf16* o = out + p * kTileRows;
    for (int64_t i = 0; i < r; ++i) {
      o[2 * i] = t0[i * a.row_stride];
      o[2 * i + 1] = p + 1 < k ? t1[i * a.row_stride] : bf16();
    }
  }
}

}  // namespace

void pack_tile_b_bf16(int64_t k, int64_t n, Strided<float> b, bf16* packed) {
  constexpr int64_t W = kPanelBf16;
  const int64_t k2 = (k + 1) / 2 * 2;
  for (int64_t j0 = 0; j0 < n; j0 += W, packed += k2 * W) {
    const int64_t w = std::min(W, n - j0);
    for (int64_t p = 0; p < k; p += 2) {
      bf16* dst = packed + p * W;  // pair p / 2: [W columns][2 terms]
      const float* t0 = b.data + p * b.row_stride + j0 * b.col_stride;
      const float* t1 = t0 + b.row_stride;
      for (int64_t j = 0; j < w; ++j) {
        dst[2 * j] = bf16(t0[j * b.col_stride]);
        dst[2 * j + 1] = p + 1 < k ? bf16(t1[j * b.col_stride]) : bf16();
      }
      std::fill(dst + 2 * w, dst + 2 * W, bf16());
    }
  }
}

void tile_gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Strided<bf16> a, const bf16* b_packed,
                    bool accumulate, float* c, int64_t ldc, std::span<const TileBand> bands, BandOf band_of) {
  constexpr int64_t W = kPanelBf16;
  const int64_t blocks = tile_row_blocks(m), k2 = (k + 1) / 2 * 2;
  TITAN_CHECK(bands.empty() || static_cast<int64_t>(bands.size()) >= blocks, "tile_gemm_bf16: ", bands.size(),
              " bands for ", m, " rows of C; pass one per ", kTileRows, " rows, or none");
  // A read across its terms is repacked per register block; one buffer per thread, grown to the
  // largest k it has seen.
  const bool adjacent = a.col_stride == 1;
  thread_local std::vector<bf16> a_pairs;
  if (!adjacent && static_cast<int64_t>(a_pairs.size()) < k2 * kTileRows)
    a_pairs.resize(static_cast<size_t>(k2 * kTileRows));
  // Blocks outer and panels inner (tile_gemm runs panels outer), so that a repacked A serves
  // every panel; B of a tile (k x n bf16) stays in cache either way.
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t p0 = 0, p1 = k, c0 = 0, c1 = n;
    if (!bands.empty()) {
      const TileBand& band = bands[blk];
      if (band_of == BandOf::terms) {
        std::tie(p0, p1) = band_terms(band, k);
        p0 -= p0 % 2;  // whole pairs, as B is packed
        p1 = std::min(k, p1 + p1 % 2);
      } else {
        if (band.end <= band.begin) continue;
        c0 = band.begin;
        c1 = band.end;
      }
    }
    const int64_t i0 = blk * kTileRows, r = std::min(kTileRows, m - i0);
    const Strided<bf16> at{a.data + i0 * a.row_stride + p0 * a.col_stride, a.row_stride, a.col_stride};
    PairsOfA pairs;
    if (adjacent) {
      pairs = {at.data, at.row_stride, 2, (p1 - p0) / 2, (p1 - p0) % 2 != 0};
    } else {
      pack_a_pairs(at, r, p1 - p0, a_pairs.data());
      pairs = {a_pairs.data(), 2, 2 * kTileRows, (p1 - p0 + 1) / 2, false};
    }
    for (int64_t j0 = 0; j0 < n; j0 += W) {
      if (j0 + W <= c0 || j0 >= c1) continue;
      rows_bf16<kTileRows>(r, pairs, b_packed + j0 * k2 + p0 * W, alpha, accumulate, c + i0 * ldc + j0, ldc,
                           std::min(W, n - j0));
    }
  }
}

}  // namespace titan::kernels::cpu
