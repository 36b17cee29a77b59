#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "support/test_util.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/ops/linalg.h"

namespace titan {
namespace {

// C = alpha op(A) op(B) + beta C, naive in double, row-major with leading dims.
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                              const std::vector<float>& a, int64_t lda, const std::vector<float>& b,
                              int64_t ldb, double beta, const std::vector<float>& c, int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      out[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
  return out;
}

class GemmTranspose : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// Matrices, and a single row or column (which go to GEMV), with beta 2 and with beta 0 over NaN
// (which must be overwritten, not scaled).
TEST_P(GemmTranspose, MatchesReferenceWithPaddedLeadingDimsAndBeta) {
  auto [ta, tb] = GetParam();
  const int64_t k = 129;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{37, 19}, {1, 19}, {37, 1}, {1, 1}}) {
    for (float beta : {2.0f, 0.0f}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << ", n " << n << ", beta " << beta);
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      std::vector<float> a = test::rand_f32({(ta ? k : m) * lda}, 1).to_vector<float>();
      std::vector<float> b = test::rand_f32({(tb ? n : k) * ldb}, 2).to_vector<float>();
      std::vector<float> c = test::rand_f32({m * ldc}, 3).to_vector<float>();
      if (beta == 0) std::fill(c.begin(), c.end(), std::nanf(""));
      std::vector<double> ref = reference(ta, tb, m, n, k, 0.5, a, lda, b, ldb, beta,
                                          beta == 0 ? std::vector<float>(c.size()) : c, ldc);
      kernels::cpu::gemm<float>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(c[i * ldc + j], ref[i * ldc + j], 1e-4) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GemmTranspose, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(Gemm, StridedBatchedWithBroadcastOperand) {
  const int64_t batch = 5, m = 4, n = 3, k = 6;
  std::vector<float> a = test::rand_f32({batch * m * k}, 4).to_vector<float>();
  std::vector<float> b = test::rand_f32({k * n}, 5).to_vector<float>();  // shared by every batch
  std::vector<float> c(batch * m * n, 0.f);
  kernels::cpu::gemm_strided_batched<float>(false, false, m, n, k, 1.f, a.data(), k, m * k, b.data(), n, 0, 0.f,
                                            c.data(), n, m * n, batch);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<float> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k), ci(m * n, 0.f);
    std::vector<double> ref = reference(false, false, m, n, k, 1.0, ai, k, b, n, 0.0, ci, n);
    for (int64_t j = 0; j < m * n; ++j) ASSERT_NEAR(c[i * m * n + j], ref[j], 1e-5);
  }
}

TEST(Gemm, EmptyInnerDimScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  kernels::cpu::gemm<float>(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
}

// Side by side on threads of their own (as many threads as calls, or fewer) or in turn (more
// threads than calls, or one), each call gives what gemm gives it alone, up to the order of the
// sum over k (OpenBLAS blocks k differently with and without threads), and the same bits every
// time for a given thread count.
TEST(Gemm, ConcurrentCallsMatchCallsInTurn) {
  const int64_t m = 300, n = 260, k = 280;  // large enough that OpenBLAS threads a call of its own
  std::vector<float> a = test::rand_f32({m * k}, 8).to_vector<float>();
  std::vector<float> b = test::rand_f32({k * n}, 9).to_vector<float>();
  std::vector<float> c2 = test::rand_f32({m * m}, 10).to_vector<float>();
  using Call = kernels::cpu::GemmCall<float>;
  using Outputs = std::vector<std::vector<float>>;
  auto calls_into = [&](Outputs& c) {
    return std::vector<Call>{{false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c[0].data(), n},
                             {true, true, k, k, n, 0.5f, b.data(), n, b.data(), n, 0.f, c[1].data(), k},
                             {false, true, m, m, k, 1.f, a.data(), k, a.data(), k, 1.f, c[2].data(), m}};
  };
  const int threads = omp_get_max_threads();
  for (int t : {1, 2, 3, 4})
    for (size_t count : {size_t{2}, size_t{3}}) {
      SCOPED_TRACE(::testing::Message() << t << " threads, " << count << " calls");
      omp_set_num_threads(t);
      const Outputs fresh{std::vector<float>(m * n, std::nanf("")), std::vector<float>(k * k, std::nanf("")),
                          c2};
      Outputs alone = fresh, side = fresh, again = fresh;
      const std::vector<Call> one = calls_into(alone), both = calls_into(side), twice = calls_into(again);
      for (const Call& c : std::span(one).first(count))
        kernels::cpu::gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, c.a, c.lda, c.b, c.ldb, c.beta, c.c,
                           c.ldc);
      kernels::cpu::gemm_concurrent<float>(std::span(both).first(count));
      kernels::cpu::gemm_concurrent<float>(std::span(twice).first(count));
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(side[i], again[i]) << "call " << i;
        for (size_t j = 0; j < side[i].size(); ++j)
          ASSERT_NEAR(side[i][j], alone[i][j], 1e-5 * (1 + std::fabs(alone[i][j])))
              << "call " << i << ", " << j;
      }
    }
  omp_set_num_threads(threads);
}

TEST(Matmul, TransposedViewsGoToBlasWithoutCopies) {
  Tensor a = test::rand_f32({64, 32}, 6), b = test::rand_f32({48, 32}, 7);
  Tensor viaT = ops::matmul(a, b.transpose(0, 1));
  Tensor viaCopy = ops::matmul(a, b.transpose(0, 1).contiguous());
  EXPECT_TRUE(test::tensors_close(viaT, viaCopy, 1e-6));
}

}  // namespace
}  // namespace titan
