#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "support/test_util.h"
#include "titan/kernels/cpu/tile_gemm.h"

namespace titan {
namespace {

using kernels::cpu::BandOf;
using kernels::cpu::kTilePanel;
using kernels::cpu::kTileRows;
using kernels::cpu::pack_tile_b;
using kernels::cpu::Strided;
using kernels::cpu::tile_gemm;
using kernels::cpu::tile_packed_size;
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

}  // namespace
}  // namespace titan
