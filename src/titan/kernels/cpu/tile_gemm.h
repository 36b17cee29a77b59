#pragma once
// Small GEMMs on operands that stay in cache: attention's tiles (a 128 x 128 block of scores
// against a head dimension of 64). A BLAS call packs both operands into its own layout and
// zeroes C before every product, and at these sizes that costs as much as the product: on 2
// cores OpenBLAS ran splash attention's tile products at 57-84 GFLOP/s a core, this kernel at
// 83-92 (AVX2 vectors; with AVX-512's, on an AVX-512 machine, splash attention's forward and
// backward at seq 512-1024 ran 1.5-1.6x faster again, bench_attention). Here the caller packs the B operand
// once (attention packs every key and query block once per call and reuses it across the tiles that read it)
// and A is read in place.
//
//   C[m, n] = alpha * A[m, k] B[k, n]      (accumulate = false)
//   C[m, n] += alpha * A[m, k] B[k, n]     (accumulate = true)
#include <cstdint>
#include <span>

#include "titan/core/dtype.h"

namespace titan::kernels::cpu {

// The SIMD vector the kernel is built for: AVX-512's where the build targets it (-march=native
// on such a CPU), AVX2's otherwise.
#ifdef __AVX512F__
inline constexpr int64_t kTileVectorBytes = 64;
#else
inline constexpr int64_t kTileVectorBytes = 32;
#endif

// Columns of B in one packed panel: two SIMD vectors of T.
template <typename T>
inline constexpr int64_t kTilePanel = 2 * kTileVectorBytes / static_cast<int64_t>(sizeof(T));

// Rows of C in one register block: kTileRows x 2 accumulators plus two B vectors and a broadcast
// fill 27 of AVX-512's 32 vector registers, or 15 of AVX2's 16. The grain of TileBand.
inline constexpr int64_t kTileRows = kTileVectorBytes == 64 ? 12 : 6;

// Register blocks of rows in m rows of C: the bands a product of m rows takes.
constexpr int64_t tile_row_blocks(int64_t m) {
  return (m + kTileRows - 1) / kTileRows;
}

// Elements of a packed [k, n] B operand: n rounded up to whole panels.
template <typename T>
constexpr int64_t tile_packed_size(int64_t k, int64_t n) {
  return k * ((n + kTilePanel<T> - 1) / kTilePanel<T> * kTilePanel<T>);
}

// A matrix read in place: element (i, j) at data[i * row_stride + j * col_stride], which is a
// row-major matrix (col_stride 1) or the transpose of one (row_stride 1).
template <typename T>
struct Strided {
  const T* data;
  int64_t row_stride, col_stride;
};

// Packs a [k, n] B operand for tile_gemm: panel j holds columns [j * kTilePanel,
// (j + 1) * kTilePanel) as [k][kTilePanel], the last zero-padded.
template <typename T>
void pack_tile_b(int64_t k, int64_t n, Strided<T> b, T* packed);

// What one register block of rows of C needs of a product whose operands are mostly zero or
// masked (attention's tiles on a mask's edge): band i covers rows [i * kTileRows, (i + 1) *
// kTileRows) and names a range [begin, end) of either
// - `columns`: the columns of C those rows need. Only the panels that hold them are computed;
//   the rest of the rows is left as it was. An empty range leaves the rows untouched.
// - `terms`: the p of the sum that can be nonzero for those rows. The sum runs over them alone,
//   in order, as if A's or B's other terms were zero (the caller vouches that they are), so it
//   gives the full sum's result. An empty range gives 0 (or adds nothing).
struct TileBand {
  int64_t begin, end;
};
enum class BandOf { columns, terms };

// The product of A, read in place, and B packed by pack_tile_b for these k and n; with `bands`
// (one per kTileRows rows of C), only the part each band names. Each element of C is one sum
// over p in order, so results do not depend on threads or on where the tile sits.
template <typename T>
void tile_gemm(int64_t m, int64_t n, int64_t k, T alpha, Strided<T> a, const T* b_packed, bool accumulate,
               T* c, int64_t ldc, std::span<const TileBand> bands = {}, BandOf band_of = BandOf::columns);

// ---- bf16 operands, float32 sums -----------------------------------------------------------------
// The same product with A and B in bf16 and C, alpha and every sum in float32: attention's tiles
// under bf16 autocast. With AVX512-BF16 (__AVX512BF16__) each step is _mm512_dpbf16_ps, which
// multiplies a pair of bf16 terms along k by a pair and adds both products into one float32 lane,
// so B is packed in pairs along k ("VNNI" layout, as oneDNN packs it) and A is read as pairs of
// terms broadcast as one 32-bit value; an odd k pads B with a zero term. Denormal operands count
// as zero, as those instructions read them. Without the instructions the kernel runs a scalar
// loop, correct but many times slower: the trainer refuses bf16 on such CPUs (oneDNN's bf16
// GEMMs need the instructions too), so only tests run it there.

// Columns of B in one packed panel: two SIMD vectors of float32 accumulators.
inline constexpr int64_t kTilePanelBf16 = kTilePanel<float>;

// Elements of a packed [k, n] B operand: k rounded up to whole pairs, n to whole panels.
constexpr int64_t tile_packed_size_bf16(int64_t k, int64_t n) {
  return (k + 1) / 2 * 2 * ((n + kTilePanelBf16 - 1) / kTilePanelBf16 * kTilePanelBf16);
}

// Packs a [k, n] float32 B operand as bf16 (rounded to nearest even) for tile_gemm_bf16: panel j
// holds columns [j * kTilePanelBf16, (j + 1) * kTilePanelBf16) as [k / 2 pairs][kTilePanelBf16
// columns][2 terms], the last panel's missing columns and an odd k's missing term zero.
void pack_tile_b_bf16(int64_t k, int64_t n, Strided<float> b, bf16* packed);

// C (+)= alpha * A B as tile_gemm computes it, with bf16 A and B (packed by pack_tile_b_bf16),
// float32 C and sums. `bands` as for tile_gemm; a `terms` band widens to whole pairs of terms,
// whose extra term the caller vouches is zero as it vouches for the rest. Each element of C is
// one sum over the pairs in order: results do not depend on threads or on where the tile sits.
void tile_gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Strided<bf16> a, const bf16* b_packed,
                    bool accumulate, float* c, int64_t ldc, std::span<const TileBand> bands = {},
                    BandOf band_of = BandOf::columns);

}  // namespace titan::kernels::cpu
