#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "support/test_util.h"
#include "titan/kernels/cpu/tile_gemm.h"

namespace titan {
namespace {

using kernels::cpu::BandOf;
using kernels::cpu::kTilePanel;
using kernels::cpu::kTilePanelBf16;
using kernels::cpu::kTileRows;
using kernels::cpu::pack_tile_b;
using kernels::cpu::pack_tile_b_bf16;
using kernels::cpu::Strided;
using kernels::cpu::tile_gemm;
using kernels::cpu::tile_gemm_bf16;
using kernels::cpu::tile_packed_size;
using kernels::cpu::tile_packed_size_bf16;
using kernels::cpu::TileBand;

template <typename T>
std::vector<T> random(int64_t n, uint64_t seed) {
  std::vector<float> v = test::rand_f32({n}, seed).to_vector<float>();
  return std::vector<T>(v.begin(), v.end());
}

// Every shape class the kernel splits on: rows a multiple of its 6-row block and not, columns a
// whole number of panels, one partial panel and fewer than one, k of 1 and odd; A read as a
// row-major matrix and as a transposed one, B packed from a matrix and from its transpose, C
// overwritten (over NaN) and accumulated into, with padded leading dimensions throughout.
template <typename T>
void check_against_fp64() {
  const int64_t W = kTilePanel<T>;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{12, 2 * W, 64},
                         {13, 2 * W + 3, 37},
                         {5, W - 1, 1},
                         {1, 1, 8},
                         {128, 4 * W, 128}}) {
    for (bool a_transposed : {false, true})
      for (bool b_transposed : {false, true})
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "m " << m << " n " << n << " k " << k << " A^T " << a_transposed << " B^T "
                       << b_transposed << " accumulate " << accumulate);
          const int64_t lda = (a_transposed ? m : k) + 3, ldb = (b_transposed ? k : n) + 5, ldc = n + 2;
          const std::vector<T> a = random<T>((a_transposed ? k : m) * lda, 1);
          const std::vector<T> b = random<T>((b_transposed ? n : k) * ldb, 2);
          std::vector<T> c = random<T>(m * ldc, 3);
          if (!accumulate) std::fill(c.begin(), c.end(), std::numeric_limits<T>::quiet_NaN());
          const std::vector<T> c0 = c;
          const Strided<T> view = a_transposed ? Strided<T>{a.data(), 1, lda} : Strided<T>{a.data(), lda, 1};
          std::vector<T> packed(static_cast<size_t>(tile_packed_size<T>(k, n)), T(7));
          pack_tile_b<T>(k, n, b_transposed ? Strided<T>{b.data(), 1, ldb} : Strided<T>{b.data(), ldb, 1},
                         packed.data());
          const T alpha = T(0.375);
          tile_gemm<T>(m, n, k, alpha, view, packed.data(), accumulate, c.data(), ldc);

          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              if (j >= n) {  // padding past column n is never written
                EXPECT_EQ(std::isnan(c[i * ldc + j]), std::isnan(c0[i * ldc + j]));
                continue;
              }
              double want = 0;
              for (int64_t p = 0; p < k; ++p) {
                const double x = a_transposed ? a[p * lda + i] : a[i * lda + p];
                const double y = b_transposed ? b[j * ldb + p] : b[p * ldb + j];
                want += x * y;
              }
              want = alpha * want + (accumulate ? static_cast<double>(c0[i * ldc + j]) : 0.0);
              ASSERT_NEAR(c[i * ldc + j], want, tol * (1 + std::abs(want)))
                  << "at (" << i << ", " << j << ")";
            }
        }
  }
}

TEST(TileGemm, FloatMatchesFp64Reference) {
  check_against_fp64<float>();
}
TEST(TileGemm, DoubleMatchesFp64Reference) {
  check_against_fp64<double>();
}

// A tile's products depend on its own operands alone: the same rows placed anywhere in C and
// computed as part of a taller tile give the same bits (attention relies on this for results
// that do not depend on how the work is split).
TEST(TileGemm, RowsAreIndependentOfTheTileAroundThem) {
  const int64_t m = 20, n = 40, k = 33;
  const std::vector<float> a = random<float>(m * k, 4), b = random<float>(k * n, 5);
  std::vector<float> packed(static_cast<size_t>(tile_packed_size<float>(k, n)));
  pack_tile_b<float>(k, n, {b.data(), n, 1}, packed.data());
  std::vector<float> whole(m * n), part(m * n);
  tile_gemm<float>(m, n, k, 1.0f, {a.data(), k, 1}, packed.data(), false, whole.data(), n);
  for (int64_t i = 0; i < m; i += 7) {
    const int64_t rows = std::min<int64_t>(7, m - i);
    tile_gemm<float>(rows, n, k, 1.0f, {a.data() + i * k, k, 1}, packed.data(), false, part.data() + i * n,
                     n);
  }
  EXPECT_EQ(whole, part);
}

// Bands of a causal diagonal tile and more: column bands compute the panels that hold each row
// block's columns (the rest of its rows untouched); term bands sum over their p alone, which
// equals the whole product, bit for bit, when A is zero outside them; empty bands of either kind.
TEST(TileGemm, BandsComputeWhatTheyNameAndNothingElse) {
  const int64_t W = kTilePanel<float>, R = kTileRows;
  const int64_t m = 3 * R + 5, n = 3 * W + 7, k = 2 * W + 3;
  const int64_t blocks = (m + R - 1) / R;
  const std::vector<float> b = random<float>(k * n, 7);
  std::vector<float> packed(static_cast<size_t>(tile_packed_size<float>(k, n)));
  pack_tile_b<float>(k, n, {b.data(), n, 1}, packed.data());
  const std::vector<TileBand> bands = {{0, 1}, {W + 2, W + 3}, {5, 5}, {2 * W - 1, n}};
  ASSERT_EQ(static_cast<int64_t>(bands.size()), blocks);

  // Columns: the panels [begin, end) falls in, whole; NaN elsewhere stays NaN.
  {
    const std::vector<float> a = random<float>(m * k, 8);
    std::vector<float> full(m * n), part(m * n, std::numeric_limits<float>::quiet_NaN());
    tile_gemm<float>(m, n, k, 0.5f, {a.data(), k, 1}, packed.data(), false, full.data(), n);
    tile_gemm<float>(m, n, k, 0.5f, {a.data(), k, 1}, packed.data(), false, part.data(), n, bands,
                     BandOf::columns);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const TileBand& band = bands[i / R];
        const bool computed = band.begin < band.end && j / W >= band.begin / W && j / W <= (band.end - 1) / W;
        if (computed)
          EXPECT_EQ(part[i * n + j], full[i * n + j]) << "(" << i << ", " << j << ")";
        else
          EXPECT_TRUE(std::isnan(part[i * n + j])) << "(" << i << ", " << j << ")";
      }
  }
  // Terms: A zero outside each row block's band; accumulated into C as the full product would be.
  {
    std::vector<float> a = random<float>(m * k, 9);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        if (p < bands[i / R].begin || p >= bands[i / R].end) a[i * k + p] = 0;
    const std::vector<float> c0 = random<float>(m * n, 10);
    std::vector<float> full = c0, part = c0;
    tile_gemm<float>(m, n, k, 0.5f, {a.data(), k, 1}, packed.data(), true, full.data(), n);
    tile_gemm<float>(m, n, k, 0.5f, {a.data(), k, 1}, packed.data(), true, part.data(), n, bands,
                     BandOf::terms);
    EXPECT_EQ(part, full);
    // Overwriting: an empty band writes zeros.
    std::vector<float> over(m * n, std::numeric_limits<float>::quiet_NaN());
    tile_gemm<float>(m, n, k, 0.5f, {a.data(), k, 1}, packed.data(), false, over.data(), n, bands,
                     BandOf::terms);
    for (int64_t i = 2 * R; i < 3 * R; ++i)
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(over[i * n + j], 0.0f);
  }
  EXPECT_THROW(
      tile_gemm<float>(m, n, k, 1.0f, {random<float>(m * k, 1).data(), k, 1}, packed.data(), false,
                       std::vector<float>(m * n).data(), n, std::span(bands).first(2), BandOf::terms),
      Error);
}

// ---- bf16 operands ---------------------------------------------------------------------------------

// Values that bf16 holds exactly, as float: their products are exact in float32, so the bf16
// kernel and the float one differ only in the order of their float32 sums.
std::vector<float> bf16_values(int64_t n, uint64_t seed) {
  std::vector<float> v = random<float>(n, seed);
  for (float& x : v) x = static_cast<float>(bf16(x));
  return v;
}

// Random shapes (k odd and even, m past whole register blocks, n past whole panels), A read in
// place and transposed, B packed from a matrix and from its transpose, bands of either kind or
// none, C overwritten or accumulated into. Each element within 1e-5 of alpha * sum |a||b| + |c0|
// (k <= 70 float32 roundings in either order stay under 1e-5 of that); elements outside column
// bands untouched (NaN stays NaN); term bands, with A zero outside them, equal to the unbanded
// bf16 product bit for bit.
TEST(TileGemm, Bf16MatchesFloatOnBf16Values) {
  EXPECT_EQ(kTilePanelBf16, kTilePanel<float>);  // the same panels, so column bands compute alike
  std::mt19937 rng(17);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t W = kTilePanelBf16;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t m = pick(1, 3 * kTileRows + 5), n = pick(1, 3 * W + 5), k = pick(1, 70);
    const bool a_transposed = pick(0, 1), b_transposed = pick(0, 1), accumulate = pick(0, 1);
    const int kind = static_cast<int>(pick(0, 2));  // no bands, columns, terms
    const BandOf band_of = kind == 2 ? BandOf::terms : BandOf::columns;
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " A^T " << a_transposed
                                      << " B^T " << b_transposed << " accumulate " << accumulate << " bands "
                                      << (kind == 0   ? "none"
                                          : kind == 1 ? "columns"
                                                      : "terms"));
    std::vector<TileBand> bands;
    if (kind != 0)
      for (int64_t blk = 0; blk < (m + kTileRows - 1) / kTileRows; ++blk) {
        const int64_t extent = kind == 1 ? n : k, begin = pick(0, extent);
        bands.push_back({begin, pick(std::max<int64_t>(0, begin - 1), extent)});
      }

    const int64_t lda = (a_transposed ? m : k) + 3, ldb = (b_transposed ? k : n) + 5, ldc = n + 2;
    std::vector<float> a = bf16_values((a_transposed ? k : m) * lda, 20 + trial);
    auto a_at = [&](int64_t i, int64_t p) -> float& {
      return a_transposed ? a[p * lda + i] : a[i * lda + p];
    };
    if (kind == 2)  // A zero outside each row block's terms, as the caller of term bands vouches
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
          if (p < bands[i / kTileRows].begin || p >= bands[i / kTileRows].end) a_at(i, p) = 0;
    const std::vector<float> b = bf16_values((b_transposed ? n : k) * ldb, 40 + trial);
    std::vector<float> c0 = random<float>(m * ldc, 60 + trial);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = accumulate ? n : 0; j < ldc; ++j)
        c0[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
    std::vector<bf16> a16(a.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = bf16(a[i]);
    const Strided<float> bview =
        b_transposed ? Strided<float>{b.data(), 1, ldb} : Strided<float>{b.data(), ldb, 1};
    std::vector<float> packed(static_cast<size_t>(tile_packed_size<float>(k, n)));
    std::vector<bf16> packed16(static_cast<size_t>(tile_packed_size_bf16(k, n)), bf16(7.0f));
    pack_tile_b<float>(k, n, bview, packed.data());
    pack_tile_b_bf16(k, n, bview, packed16.data());
    const float alpha = 0.375f;
    std::vector<float> want = c0, got = c0;
    tile_gemm<float>(m, n, k, alpha,
                     a_transposed ? Strided<float>{a.data(), 1, lda} : Strided<float>{a.data(), lda, 1},
                     packed.data(), accumulate, want.data(), ldc, bands, band_of);
    const Strided<bf16> a16view =
        a_transposed ? Strided<bf16>{a16.data(), 1, lda} : Strided<bf16>{a16.data(), lda, 1};
    tile_gemm_bf16(m, n, k, alpha, a16view, packed16.data(), accumulate, got.data(), ldc, bands, band_of);

    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const float w = want[i * ldc + j], g = got[i * ldc + j];
        const TileBand band = kind == 1 ? bands[i / kTileRows] : TileBand{0, n};
        const bool computed =
            j < n && band.begin < band.end && j / W >= band.begin / W && j / W <= (band.end - 1) / W;
        if (!computed) {
          const float c = c0[i * ldc + j];
          EXPECT_TRUE(std::isnan(c) ? std::isnan(g) : g == c)
              << "(" << i << ", " << j << ") was written: " << g;
          continue;
        }
        double magnitude = accumulate ? std::abs(c0[i * ldc + j]) : 0;
        for (int64_t p = 0; p < k; ++p)
          magnitude += std::abs(alpha * a_at(i, p) * (b_transposed ? b[j * ldb + p] : b[p * ldb + j]));
        ASSERT_NEAR(g, w, 1e-5 * magnitude + 1e-30) << "at (" << i << ", " << j << ")";
      }
    if (kind == 2) {
      std::vector<float> whole = c0;
      tile_gemm_bf16(m, n, k, alpha, a16view, packed16.data(), accumulate, whole.data(), ldc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[i * ldc + j], whole[i * ldc + j])
              << "terms band vs whole at (" << i << ", " << j << ")";
    }
  }
  EXPECT_THROW(tile_gemm_bf16(2 * kTileRows, 8, 8, 1.0f, {nullptr, 8, 1}, nullptr, false, nullptr, 8,
                              std::vector<TileBand>{{0, 1}}, BandOf::terms),
               Error);
}

}  // namespace
}  // namespace titan
