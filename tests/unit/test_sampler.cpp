// Sampling the next token: greedy, temperature, top-k, top-p, reproducible draws, and the errors
// for options that make no sense.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "support/test_util.h"
#include "titan/rl/sampler.h"

namespace titan::rl {
namespace {

Tensor logits_of(const std::vector<double>& x) {
  return Tensor::from_vector(std::vector<float>(x.begin(), x.end()), {static_cast<int64_t>(x.size())});
}

// Logits whose softmax is `p`.
Tensor logits_for(const std::vector<double>& p) {
  std::vector<double> x;
  for (double v : p) x.push_back(std::log(v));
  return logits_of(x);
}

std::vector<int64_t> ids_of(const std::vector<std::pair<int64_t, double>>& dist) {
  std::vector<int64_t> ids;
  for (const auto& [id, p] : dist) ids.push_back(id);
  return ids;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler greedy({.temperature = 0});
  EXPECT_EQ(greedy.sample(logits_of({0.1, 2.5, -1, 2.4})), 1);
  EXPECT_EQ(greedy.sample(logits_of({-3, -2, -2.5})), 1);
  EXPECT_EQ(greedy.sample(logits_of({1, 3, 3})), 1) << "the first of equal logits";
  auto dist = greedy.distribution(logits_of({0.1, 2.5, -1}));
  ASSERT_EQ(dist.size(), 1u);
  EXPECT_EQ(dist[0], (std::pair<int64_t, double>{1, 1.0}));
}

TEST(Sampler, TopKOfOneIsGreedy) {
  Tensor x = logits_of({0.3, 0.2, 0.35, 0.1});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler s({.temperature = 1.5, .top_k = 1, .seed = seed});
    EXPECT_EQ(s.sample(x), 2);
  }
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  Sampler s({.temperature = 1, .top_k = 3});
  auto dist = s.distribution(logits_for({0.1, 0.3, 0.05, 0.25, 0.3}));
  EXPECT_EQ(ids_of(dist), (std::vector<int64_t>{1, 4, 3})) << "most likely first, equals by id";
  // Renormalised over the kept: 0.3, 0.3, 0.25 of 0.85.
  EXPECT_NEAR(dist[0].second, 0.3 / 0.85, 1e-6);
  EXPECT_NEAR(dist[2].second, 0.25 / 0.85, 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  Tensor x = logits_for({0.05, 0.5, 0.15, 0.2, 0.1});
  // Masses most likely first: 0.5, 0.7, 0.85, 0.95, 1.
  const std::vector<std::pair<double, std::vector<int64_t>>> cases = {
      {0.3, {1}}, {0.45, {1}}, {0.6, {1, 3}}, {0.8, {1, 3, 2}}, {0.9, {1, 3, 2, 4}}, {1.0, {0, 1, 2, 3, 4}}};
  for (const auto& [p, kept] : cases) {
    Sampler s({.temperature = 1, .top_p = p});
    auto dist = s.distribution(x);
    EXPECT_EQ(ids_of(dist), kept) << "top_p " << p;
    double total = 0;
    for (const auto& [id, q] : dist) total += q;
    EXPECT_NEAR(total, 1.0, 1e-12) << "top_p " << p;
  }
  // After top-k: the mass is that of the k kept (0.5 and 0.2 of 0.7), so 0.75 needs both.
  Sampler both({.temperature = 1, .top_k = 2, .top_p = 0.75});
  EXPECT_EQ(ids_of(both.distribution(x)), (std::vector<int64_t>{1, 3}));
}

TEST(Sampler, TemperatureScalesTheLogits) {
  Tensor x = logits_for({0.2, 0.8});
  Sampler hot({.temperature = 2});
  auto dist = hot.distribution(x);
  // softmax(log p / 2) = sqrt(p) / sum sqrt(p).
  const double a = std::sqrt(0.2), b = std::sqrt(0.8);
  EXPECT_NEAR(dist[0].second, a / (a + b), 1e-6);
  EXPECT_NEAR(dist[1].second, b / (a + b), 1e-6);
}

TEST(Sampler, DrawsFollowTheDistribution) {
  Tensor x = logits_for({0.1, 0.6, 0.3});
  Sampler s({.temperature = 1, .seed = 5});
  std::map<int64_t, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(x)];
  // Binomial std at p = 0.6: sqrt(0.24 / n) = 0.0035; 0.015 is over 4 std.
  EXPECT_NEAR(count[0] / double(n), 0.1, 0.015);
  EXPECT_NEAR(count[1] / double(n), 0.6, 0.015);
  EXPECT_NEAR(count[2] / double(n), 0.3, 0.015);
  // -inf marks a token never drawn.
  Tensor masked = logits_of({0.0, -INFINITY, 0.0});
  Sampler m({.temperature = 1});
  for (int i = 0; i < 200; ++i) EXPECT_NE(m.sample(masked), 1);
}

TEST(Sampler, TheSeedFixesTheDraws) {
  Tensor x = logits_of({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8});
  auto draws = [&](uint64_t seed) {
    Sampler s({.temperature = 1, .seed = seed});
    std::vector<int64_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(s.sample(x));
    return out;
  };
  EXPECT_EQ(draws(3), draws(3));
  EXPECT_NE(draws(3), draws(4));
}

TEST(Sampler, BadOptionsAreClearErrors) {
  EXPECT_TITAN_ERROR(Sampler({.temperature = -0.5}), "temperature = -0.5", ">= 0");
  EXPECT_TITAN_ERROR(Sampler({.temperature = NAN}), "temperature", "finite");
  EXPECT_TITAN_ERROR(Sampler({.top_k = -1}), "top_k = -1", ">= 0");
  EXPECT_TITAN_ERROR(Sampler({.top_p = 0}), "top_p = 0", "(0, 1]");
  EXPECT_TITAN_ERROR(Sampler({.top_p = 1.5}), "top_p = 1.5", "(0, 1]");
  Sampler s({});
  EXPECT_TITAN_ERROR(s.sample(logits_of({0.5, NAN})), "logit 1", "nan");
  EXPECT_TITAN_ERROR(s.sample(logits_of({-INFINITY, -INFINITY})), "every logit", "-inf");
  EXPECT_TITAN_ERROR(s.sample(Tensor::zeros({2, 3})), "expected logits [vocab]");
}

}  // namespace
}  // namespace titan::rl
