#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/ops/loss.h"

namespace titan {
namespace {

using ops::Reduction;
using test::rand_f64;

// Targets (r * 5 + 2) % vocab, with every third row (from row 1) set to `ignore`.
Tensor targets_for(const Shape& rows, int64_t vocab, int64_t ignore = -100, DType dtype = kI64) {
  std::vector<int64_t> t(static_cast<size_t>(numel_of(rows)));
  for (size_t r = 0; r < t.size(); ++r) t[r] = r % 3 == 1 ? ignore : static_cast<int64_t>(r * 5 + 2) % vocab;
  return Tensor::from_vector<int64_t>(t, rows).to(dtype);
}

// logsumexp of each row of a [rows, vocab] tensor, in double.
std::vector<double> reference_lse(const Tensor& logits) {
  const int64_t vocab = logits.size(-1), rows = logits.numel() / vocab;
  std::vector<double> x = logits.to_vector<double>(), lse(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, x[r * vocab + j]);
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[r * vocab + j] - m);
    lse[r] = m + std::log(s);
  }
  return lse;
}

double reference_loss(const Tensor& logits, const Tensor& targets, int64_t ignore, Reduction red) {
  const int64_t vocab = logits.size(-1);
  std::vector<double> x = logits.to_vector<double>(), lse = reference_lse(logits);
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  double total = 0;
  int64_t count = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) continue;
    total += lse[r] - x[static_cast<int64_t>(r) * vocab + t[r]];
    ++count;
  }
  return red == Reduction::sum ? total : total / static_cast<double>(count);
}

TEST(CrossEntropy, MatchesReference) {
  Tensor x = test::rand_f32({5, 11}, 60, -4, 4);
  for (DType dt : {kI32, kI64}) {
    Tensor t = targets_for({5}, 11, -100, dt);
    for (Reduction red : {Reduction::mean, Reduction::sum}) {
      double got = ops::cross_entropy(x, t, -100, red).item();
      double want = reference_loss(x, t, -100, red);
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want));
    }
  }
}

TEST(CrossEntropy, IgnoreIndexMayBeAValidClass) {
  // Rows whose target is 0 are ignored when ignore_index is 0.
  Tensor x = rand_f64({4, 3}, 61);
  Tensor t = Tensor::from_vector<int64_t>({0, 2, 0, 1}, {4});
  Tensor loss = ops::cross_entropy(x, t, 0);
  EXPECT_NEAR(loss.item(), reference_loss(x, t, 0, Reduction::mean), 1e-12);
  loss.backward();
  std::vector<double> g = x.grad().to_vector<double>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(g[j], 0.0);
    EXPECT_EQ(g[6 + j], 0.0);
  }
}

class CrossEntropySizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(CrossEntropySizes, Gradcheck) {
  int64_t n = GetParam();
  for (Shape shape : {Shape{n, 7}, Shape{7, n}, Shape{2, n, 3}}) {
    Tensor x = rand_f64(shape, 70 + static_cast<uint64_t>(n), true, -3, 3);
    Shape rows(shape.begin(), shape.end() - 1);
    for (DType dt : {kI32, kI64}) {
      Tensor t = targets_for(rows, shape.back(), -100, dt);
      for (Reduction red : {Reduction::mean, Reduction::sum}) {
        auto res = autograd::gradcheck(
            [t, red](auto& v) { return std::vector<Tensor>{ops::cross_entropy(v[0], t, -100, red)}; }, {x});
        EXPECT_TRUE(res.ok) << shape_str(shape) << (red == Reduction::sum ? " sum: " : " mean: ")
                            << res.message;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, CrossEntropySizes, ::testing::Values(1, 7, 129));

TEST(CrossEntropy, AnyChunkSizeGivesTheLogsumexp) {
  const int64_t rows = 3, vocab = 1000;
  Tensor x = test::rand_f32({rows, vocab}, 80, -10, 10);
  std::vector<float> xs = x.to_vector<float>();
  // Row 1 starts with a masked-out span longer than several chunks: it must not become NaN.
  for (int64_t j = 0; j < 300; ++j) xs[vocab + j] = -INFINITY;
  x = Tensor::from_vector<float>(xs, {rows, vocab});
  std::vector<double> want = reference_lse(x);
  std::vector<int64_t> t = {5, 400, 999};
  for (int64_t chunk : {1, 3, 7, 64, 999, 1000, 4096}) {
    std::vector<float> lse(rows);
    auto sums = kernels::cpu::cross_entropy_forward<float, int64_t>(xs.data(), t.data(), rows, vocab, -100,
                                                                    lse.data(), chunk);
    EXPECT_EQ(sums.count, 3);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(lse[r], want[r], 2e-6 * std::abs(want[r])) << "chunk " << chunk;
  }
}

TEST(CrossEntropy, NanLogitsGiveNanLoss) {
  std::vector<float> xs(2 * 5000, 0.f);
  xs[4321] = NAN;  // row 0, past the first chunk
  Tensor x = Tensor::from_vector<float>(xs, {2, 5000});
  EXPECT_TRUE(std::isnan(ops::cross_entropy(x, Tensor::from_vector<int64_t>({1, 2}, {2})).item()));
}

TEST(CrossEntropy, FewRowsHugeVocabMatchesAndIsThreadCountInvariant) {
  const int64_t rows = 8, vocab = 131072;
  Tensor t = targets_for({rows}, vocab);
  auto run = [&](int threads) {
    Tensor x = test::rand_f32({rows, vocab}, 90, -8, 8).requires_grad_();
    set_num_threads(threads);
    Tensor loss = ops::cross_entropy(x, t);
    loss.backward();
    return std::pair{loss, x.grad()};
  };
  const int before = num_threads();
  auto [l1, g1] = run(1);
  auto [l2, g2] = run(std::max(2, before));
  set_num_threads(before);
  Tensor x = test::rand_f32({rows, vocab}, 90, -8, 8);
  EXPECT_NEAR(l1.item(), reference_loss(x, t, -100, Reduction::mean), 1e-6 * l1.item());
  EXPECT_EQ(l1.item(), l2.item());
  EXPECT_EQ(std::memcmp(g1.data_ptr(), g2.data_ptr(), g1.nbytes()), 0);
  // The gradient of a row sums to zero: softmax sums to one, minus the one-hot.
  std::vector<float> g = g1.to_vector<float>();
  double row0 = 0;
  for (int64_t j = 0; j < vocab; ++j) row0 += g[j];
  EXPECT_NEAR(row0, 0.0, 1e-6);
}

TEST(CrossEntropy, NonContiguousLogits) {
  Tensor xt = rand_f64({9, 4}, 95);  // [V, N]
  Tensor t = targets_for({4}, 9);
  Tensor loss = ops::cross_entropy(xt.transpose(0, 1), t);
  EXPECT_NEAR(loss.item(), reference_loss(xt.transpose(0, 1).contiguous(), t, -100, Reduction::mean), 1e-12);
  loss.backward();
  EXPECT_EQ(xt.grad().sizes(), (Shape{9, 4}));
}

TEST(CrossEntropy, AllRowsIgnored) {
  // As PyTorch: the mean over no rows is NaN, the sum is 0, and the gradient is zero either way.
  Tensor t = Tensor::full({3}, -100, {.dtype = kI64});
  for (Reduction red : {Reduction::mean, Reduction::sum}) {
    Tensor x = rand_f64({3, 5}, 96);
    Tensor loss = ops::cross_entropy(x, t, -100, red);
    if (red == Reduction::mean)
      EXPECT_TRUE(std::isnan(loss.item()));
    else
      EXPECT_EQ(loss.item(), 0.0);
    loss.backward();
    for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
  }
}

TEST(CrossEntropy, ForwardAllocatesNoRowsByVocabTemporary) {
  const int64_t rows = 64, vocab = 8192;
  Tensor x = test::rand_f32({rows, vocab}, 97).requires_grad_();
  Tensor t = targets_for({rows}, vocab);
  CpuAllocator& alloc = CpuAllocator::instance();
  alloc.reset_peak();
  const int64_t base = alloc.stats().allocated_bytes;
  Tensor loss = ops::cross_entropy(x, t);
  const int64_t extra = alloc.stats().peak_allocated_bytes - base;
  // lse [rows] and the scalar loss; [rows, vocab] f32 would be 2 MiB.
  EXPECT_LE(extra, 4096) << "cross_entropy forward allocated " << extra << " bytes";
}

TEST(CrossEntropy, BadInputsNameTheProblem) {
  Tensor x = Tensor::zeros({3, 5});
  EXPECT_TITAN_ERROR(ops::cross_entropy(x, Tensor::from_vector<int64_t>({0, 5, 1}, {3})), "cross_entropy",
                     "target 5", "position [1]", "[0, 5)", "-100");
  EXPECT_TITAN_ERROR(ops::cross_entropy(x, Tensor::from_vector<int32_t>({0, 1, -1}, {3})), "cross_entropy",
                     "target -1", "position [2]", "[0, 5)");
  EXPECT_TITAN_ERROR(
      ops::cross_entropy(Tensor::zeros({2, 2, 5}), Tensor::from_vector<int64_t>({0, 1, 2, 7}, {2, 2})),
      "cross_entropy", "target 7", "position [1, 1]");
  EXPECT_TITAN_ERROR(ops::cross_entropy(x, Tensor::zeros({3})), "cross_entropy", "targets", "f32[3]");
  EXPECT_TITAN_ERROR(ops::cross_entropy(x, Tensor::zeros({4}, {.dtype = kI64})), "cross_entropy", "f32[3, 5]",
                     "i64[4]", "[3]");
  EXPECT_TITAN_ERROR(
      ops::cross_entropy(Tensor::zeros({3, 5}, {.dtype = kI64}), Tensor::zeros({3}, {.dtype = kI64})),
      "cross_entropy", "logits", "i64[3, 5]");
  EXPECT_TITAN_ERROR(ops::cross_entropy(Tensor::zeros({3, 0}), Tensor::zeros({3}, {.dtype = kI64})),
                     "cross_entropy", "no classes");
}

}  // namespace
}  // namespace titan
