#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/ops/token_log_probs.h"

namespace titan {
namespace {

// Targets (r * 7 + 3) % vocab, every fourth row (from row 2) set to -100.
Tensor targets_for(int64_t rows, int64_t vocab) {
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[r] = r % 4 == 2 ? -100 : (r * 7 + 3) % vocab;
  return Tensor::from_vector<int64_t>(t, {rows});
}

TEST(TokenLogProbs, GradcheckAtTemperatures) {
  for (int64_t vocab : {1, 7, 129}) {
    Tensor x = test::rand_f64({6, vocab}, 10 + static_cast<uint64_t>(vocab), true, -3, 3);
    const Tensor t = targets_for(6, vocab);
    for (double temperature : {1.0, 0.6, 1.7}) {
      auto res = autograd::gradcheck(
          [&](auto& v) { return std::vector<Tensor>{ops::token_log_probs(v[0], t, temperature)}; }, {x});
      EXPECT_TRUE(res.ok) << "vocab " << vocab << " T " << temperature << ": " << res.message;
    }
  }
}

TEST(TokenLogProbs, AtTemperatureOneIsMinusEachRowsCrossEntropy) {
  const Tensor x = test::rand_f64({5, 33}, 20, false, -4, 4);
  const Tensor t = targets_for(5, 33);
  const std::vector<double> lp = ops::token_log_probs(x, t).to_vector<double>();
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  for (int64_t r = 0; r < 5; ++r) {
    if (tv[r] == -100) {
      EXPECT_EQ(lp[r], 0.0);
      continue;
    }
    const double ce =
        ops::cross_entropy(x.narrow(0, r, 1), t.narrow(0, r, 1), -100, ops::Reduction::sum).item();
    EXPECT_NEAR(lp[r], -ce, 1e-12) << r;
  }
  // At a temperature: the logits divided by it first.
  const Tensor at = ops::token_log_probs(x, t, 0.5), scaled = ops::token_log_probs(x * 2.0, t);
  EXPECT_TRUE(test::tensors_close(at, scaled, 1e-12));
}

TEST(TokenLogProbs, ThreadCountDoesNotChangeTheBits) {
  // Few rows with a huge vocabulary: each row is split into segments across threads.
  const int64_t rows = 3, vocab = 100003;
  const Tensor t = targets_for(rows, vocab);
  auto run = [&](int threads) {
    Tensor x = test::rand_f32({rows, vocab}, 30, -8, 8).requires_grad_();
    set_num_threads(threads);
    Tensor lp = ops::token_log_probs(x, t, 0.7);
    lp.backward(Tensor::from_vector<float>({0.5f, -1.f, 2.f}, {rows}));
    return std::pair{lp, x.grad()};
  };
  const int before = num_threads();
  auto [l1, g1] = run(1);
  auto [l2, g2] = run(std::max(2, before));
  set_num_threads(before);
  EXPECT_TRUE(test::same_bits(l1, l2));
  EXPECT_EQ(std::memcmp(g1.data_ptr(), g2.data_ptr(), g1.nbytes()), 0);
}

TEST(TokenLogProbs, ForwardAllocatesNoRowsByVocabTemporary) {
  const int64_t rows = 64, vocab = 8192;
  Tensor x = test::rand_f32({rows, vocab}, 40).requires_grad_();
  const Tensor t = targets_for(rows, vocab);
  CpuAllocator& alloc = CpuAllocator::instance();
  alloc.reset_peak();
  const int64_t base = alloc.stats().allocated_bytes;
  Tensor lp = ops::token_log_probs(x, t, 0.9);
  const int64_t extra = alloc.stats().peak_allocated_bytes - base;
  // lse and the output, [rows] each; [rows, vocab] f32 would be 2 MiB.
  EXPECT_LE(extra, 4096) << "token_log_probs forward allocated " << extra << " bytes";
}

TEST(TokenLogProbs, BadInputsNameTheProblem) {
  const Tensor x = Tensor::zeros({3, 5});
  EXPECT_TITAN_ERROR(ops::token_log_probs(x, Tensor::from_vector<int64_t>({0, 5, 1}, {3})), "token_log_probs",
                     "target 5", "position [1]", "[0, 5)");
  EXPECT_TITAN_ERROR(ops::token_log_probs(x, Tensor::from_vector<int64_t>({0, 1, 2}, {3}), 0.0),
                     "token_log_probs", "temperature", "positive", "got 0");
  EXPECT_TITAN_ERROR(ops::token_log_probs(x, Tensor::from_vector<int64_t>({0, 1, 2}, {3}), -1.0),
                     "temperature", "got -1");
  EXPECT_TITAN_ERROR(ops::token_log_probs(x, Tensor::zeros({4}, {.dtype = kI64})), "token_log_probs",
                     "f32[3, 5]", "i64[4]");
  EXPECT_TITAN_ERROR(ops::token_entropy(x, NAN), "token_entropy", "temperature");
  EXPECT_TITAN_ERROR(ops::token_entropy(Tensor::zeros({3, 0})), "token_entropy", "class dim");
}

TEST(TokenEntropy, KnownDistributions) {
  // Uniform over V: log V at any temperature; -inf logits are outside the support.
  const Tensor uniform = Tensor::zeros({2, 1000});
  for (double h : ops::token_entropy(uniform, 0.3).to_vector<float>()) EXPECT_NEAR(h, std::log(1000.0), 1e-5);
  std::vector<float> masked(3000, -INFINITY);
  for (int j = 0; j < 3000; j += 3) masked[j] = 2.f;
  const float h = ops::token_entropy(Tensor::from_vector<float>(masked, {1, 3000})).item();
  EXPECT_NEAR(h, std::log(1000.0), 1e-5);
  // Two classes with logits 0 and log 3 (p = 1/4, 3/4); at T = 2 the gap halves.
  const Tensor two = Tensor::from_vector<double>({0.0, std::log(3.0)}, {1, 2});
  EXPECT_NEAR(ops::token_entropy(two).item(), -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
  const double q = 1 / (1 + std::sqrt(3.0));
  EXPECT_NEAR(ops::token_entropy(two, 2.0).item(), -(q * std::log(q) + (1 - q) * std::log(1 - q)), 1e-12);
  // A peaked row: near zero, never negative.
  const Tensor peaked = Tensor::from_vector<float>({0.f, 80.f, 0.f}, {1, 3});
  const float hp = ops::token_entropy(peaked).item();
  EXPECT_GE(hp, 0.f);
  EXPECT_LT(hp, 1e-30);
}

TEST(TokenEntropy, RecordsNoGradient) {
  const Tensor x = test::rand_f32({2, 9}, 50).requires_grad_();
  EXPECT_FALSE(ops::token_entropy(x).requires_grad());
}

}  // namespace
}  // namespace titan
