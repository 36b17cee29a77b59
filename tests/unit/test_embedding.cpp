#include <gtest/gtest.h>

#include <cstring>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/parallel.h"
#include "titan/ops/embedding.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::rand_f64;

// n ids in [0, vocab) from the Philox stream `seed`, skewed towards low ids (as token frequencies
// are) so that gradient rows sum many tokens.
Tensor random_ids(int64_t n, int64_t vocab, uint64_t seed, DType dtype = kI64) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float u = philox_uniform(seed, static_cast<uint64_t>(i));
    v[i] = std::min<int64_t>(vocab - 1, static_cast<int64_t>(u * u * static_cast<float>(vocab)));
  }
  return Tensor::from_vector<int64_t>(v, {n}).to(dtype);
}

TEST(Embedding, GathersRows) {
  Tensor w = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2});
  for (DType dt : {kI32, kI64}) {
    Tensor ids = Tensor::from_vector<int64_t>({2, 0, 2, 1}, {2, 2}).to(dt);
    Tensor y = ops::embedding(ids, w);
    EXPECT_EQ(y.sizes(), (Shape{2, 2, 2}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
  }
}

TEST(Embedding, BackwardSumsRepeatedIds) {
  Tensor w = Tensor::zeros({4, 2}).requires_grad_();
  Tensor ids = Tensor::from_vector<int32_t>({3, 1, 3, 3}, {4});
  ops::sum(ops::embedding(ids, w)).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 0, 3, 3}));
}

class EmbeddingSizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(EmbeddingSizes, Gradcheck) {
  int64_t n = GetParam();
  for (DType dt : {kI32, kI64}) {
    // vocab n with 7 ids, and vocab 7 with n ids (repeats whenever n > 7)
    for (auto [vocab, count] : {std::pair<int64_t, int64_t>{n, 7}, {7, n}}) {
      Tensor w = rand_f64({vocab, 3}, 40 + static_cast<uint64_t>(n));
      Tensor ids = random_ids(count, vocab, 41, dt);
      auto res =
          autograd::gradcheck([ids](auto& v) { return std::vector<Tensor>{ops::embedding(ids, v[0])}; }, {w});
      EXPECT_TRUE(res.ok) << "vocab " << vocab << ", " << count << " ids: " << res.message;
    }
  }
  // ids of rank 2 make an output of rank 3
  Tensor w = rand_f64({n, 5}, 42);
  Tensor ids = random_ids(2 * n, n, 43).reshape({2, n});
  auto res =
      autograd::gradcheck([ids](auto& v) { return std::vector<Tensor>{ops::embedding(ids, v[0])}; }, {w});
  EXPECT_TRUE(res.ok) << res.message;
}

INSTANTIATE_TEST_SUITE_P(OddSizes, EmbeddingSizes, ::testing::Values(1, 7, 129));

TEST(Embedding, BackwardIsBitIdenticalAcrossThreadCounts) {
  // Big enough that the backward splits its columns across threads.
  const int64_t vocab = 1000, dim = 256, n = 4096;
  Tensor ids = random_ids(n, vocab, 50).reshape({4, n / 4});
  Tensor cot = test::rand_f32({4, n / 4, dim}, 51);
  auto grad_with = [&](int threads) {
    Tensor w = test::rand_f32({vocab, dim}, 52).requires_grad_();
    set_num_threads(threads);
    ops::embedding(ids, w).backward(cot);
    return w.grad();
  };
  const int before = num_threads();
  Tensor g1 = grad_with(1), g2 = grad_with(2);
  set_num_threads(before);
  ASSERT_EQ(g1.sizes(), g2.sizes());
  EXPECT_EQ(std::memcmp(g1.data_ptr(), g2.data_ptr(), g1.nbytes()), 0);
}

TEST(Embedding, BadInputsNameTheProblem) {
  Tensor w = Tensor::zeros({10, 4});
  EXPECT_TITAN_ERROR(ops::embedding(Tensor::from_vector<int64_t>({1, 2, 10}, {3}), w), "embedding", "id 10",
                     "position [2]", "[0, 10)");
  EXPECT_TITAN_ERROR(ops::embedding(Tensor::from_vector<int32_t>({0, 1, 2, -1}, {2, 2}), w), "embedding",
                     "id -1", "position [1, 1]", "[0, 10)");
  EXPECT_TITAN_ERROR(ops::embedding(Tensor::zeros({3}), w), "embedding", "ids", "f32[3]");
  EXPECT_TITAN_ERROR(ops::embedding(Tensor::zeros({3}, {.dtype = kI64}), Tensor::zeros({10})), "embedding",
                     "weight", "f32[10]");
  EXPECT_TITAN_ERROR(
      ops::embedding(Tensor::zeros({3}, {.dtype = kI64}), Tensor::zeros({10, 4}, {.dtype = kI64})),
      "embedding", "weight", "i64[10, 4]");
}

}  // namespace
}  // namespace titan
