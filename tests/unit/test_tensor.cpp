#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "support/test_util.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/core/tensor.h"

namespace titan {
namespace {

TEST(Tensor, FactoriesAndMetadata) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dtype(), kF32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(Tensor::full({2}, 2.5, {.dtype = kF64}).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(Tensor::arange(4).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::arange(0, 1, 0.25, {.dtype = kF64}).to_vector<double>(),
            (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(Tensor::scalar<int32_t>(7).item(), 7.0);
  EXPECT_EQ(Tensor::full({1, 1}, 3.0).item(), 3.0);
  EXPECT_EQ(z.desc(), "f32[2, 3]");
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = Tensor::arange(0, 24, 1, {.dtype = kF32}).view({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.sizes(), (Shape{4, 3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage().get(), x.storage().get());
  Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  // t[a][b][c] = x[c][b][a]
  EXPECT_EQ(tc.to_vector<float>()[1 * 6 + 2 * 2 + 1], x.to_vector<float>()[1 * 12 + 2 * 4 + 1]);
  Tensor n = x.narrow(2, 1, 2);
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  Tensor e = Tensor::arange(0, 3, 1, {.dtype = kF32}).view({3, 1}).expand({3, 2});
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(x.permute({1, 2, 0}).sizes(), (Shape{3, 4, 2}));
  EXPECT_EQ(x.reshape({-1, 4}).sizes(), (Shape{6, 4}));
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).sizes(), x.sizes());
  // reshape of a non-viewable tensor copies
  Tensor r = t.reshape({24});
  EXPECT_NE(r.storage().get(), x.storage().get());
}

TEST(Tensor, BadViewsAreClearErrors) {
  Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_TITAN_ERROR(x.transpose(0, 2).view({24}), "view", "[4, 3, 2]", "reshape");
  EXPECT_TITAN_ERROR(x.view({5, 5}), "view", "[5, 5]", "[2, 3, 4]");
  EXPECT_TITAN_ERROR(x.narrow(1, 2, 2), "narrow", "[2, 4)", "size 3");
  EXPECT_TITAN_ERROR(x.expand({2, 5, 4}), "expand", "[2, 5, 4]");
  EXPECT_TITAN_ERROR(x.permute({0, 0, 1}), "permute", "repeated");
  EXPECT_TITAN_ERROR(x.transpose(0, 3), "transpose", "out of range");
  EXPECT_TITAN_ERROR(x.data<double>(), "data<f64>", "f32[2, 3, 4]");
  EXPECT_TITAN_ERROR(x.item(), "item", "24 elements");
}

TEST(Tensor, CastsRoundTrip) {
  Tensor x = Tensor::from_vector<float>({1.0f, -2.5f, 3.14159f, 1e-3f}, {4});
  Tensor b = x.to(kBF16);
  EXPECT_EQ(b.dtype(), kBF16);
  std::vector<float> back = b.to(kF32).to_vector<float>();
  std::vector<float> orig = x.to_vector<float>();
  for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], orig[i], std::abs(orig[i]) * 4e-3);
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(NAN))));
  // round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(Tensor::from_vector<int64_t>({3, 4}, {2}).to(kF64).to_vector<double>(), (std::vector<double>{3, 4}));
}

TEST(Rng, SameNumbersWhateverTheThreadCount) {
  Generator g1(42), g2(42);
  int before = num_threads();
  set_num_threads(1);
  Tensor a = Tensor::randn({1000, 37}, g1);
  set_num_threads(std::max(2, before));
  Tensor b = Tensor::randn({1000, 37}, g2);
  set_num_threads(before);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  // successive draws differ; a shard drawn from the stream's slice matches the whole
  Tensor c = Tensor::randn({1000, 37}, g1);
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  std::vector<float> shard(37);
  fill_normal(shard.data(), 37, 42, 37 * 5, 0.f, 1.f);
  std::vector<float> all = a.to_vector<float>();
  EXPECT_EQ(shard, std::vector<float>(all.begin() + 37 * 5, all.begin() + 37 * 6));
}

TEST(Rng, Distributions) {
  Generator g(7);
  std::vector<double> n = Tensor::randn({200000}, g, {.dtype = kF64}).to_vector<double>();
  double mean = 0, var = 0;
  for (double v : n) mean += v;
  mean /= n.size();
  for (double v : n) var += (v - mean) * (v - mean);
  var /= n.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  std::vector<float> u = Tensor::rand({100000}, g, {}, 2.0, 3.0).to_vector<float>();
  for (float v : u) ASSERT_TRUE(v >= 2.0f && v < 3.0f);
  std::vector<float> t(100000);
  fill_truncated_normal(t.data(), 100000, 3, 0, 0.f, 1.f, -2.f, 2.f);
  double tm = 0, tv = 0;
  for (float v : t) { ASSERT_TRUE(v >= -2.f && v <= 2.f); tm += v; tv += v * v; }
  tv /= t.size();
  EXPECT_NEAR(tm / t.size(), 0.0, 0.01);
  EXPECT_NEAR(tv, 0.7737, 0.01);  // variance of N(0,1) truncated to [-2, 2]
}

TEST(Allocator, CachesAndCountsPeak) {
  CpuAllocator& a = CpuAllocator::instance();
  a.reset_peak();
  MemoryStats s0 = a.stats();
  {
    Tensor t = Tensor::empty({1 << 20});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
    EXPECT_GE(a.stats().allocated_bytes - s0.allocated_bytes, 4 << 20);
  }
  EXPECT_EQ(a.stats().allocated_bytes, s0.allocated_bytes);
  EXPECT_GE(a.stats().peak_allocated_bytes - s0.allocated_bytes, 4 << 20);
  int64_t hits = a.stats().num_cache_hits;
  { Tensor t = Tensor::empty({1 << 20}); }
  if (std::getenv("TITAN_ALLOCATOR_CACHING") == nullptr) {
    EXPECT_EQ(a.stats().num_cache_hits, hits + 1);
  }
  EXPECT_EQ(CpuAllocator::round_size(1), 64u);
  EXPECT_EQ(CpuAllocator::round_size(5000), 5120u);
}

}  // namespace
}  // namespace titan
