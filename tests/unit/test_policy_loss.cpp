#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/ops/arith.h"
#include "titan/rl/policy_loss.h"

namespace titan {
namespace {

using rl::AdvantageNorm;
using rl::PolicyLossOptions;
using rl::PolicyLossStats;

constexpr int64_t kB = 3, kT = 5;

// Sequences of lengths 5, 2 and 0 (the last all padding), as right-padded rollouts.
Tensor mask_of_lengths() {
  std::vector<float> m(kB * kT, 0.f);
  const int64_t lengths[kB] = {5, 2, 0};
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < lengths[b]; ++t) m[b * kT + t] = 1.f;
  return Tensor::from_vector<float>(m, {kB, kT});
}

Tensor logp_leaf(uint64_t seed) {
  return test::rand_f32({kB, kT}, seed, -3, -0.1).requires_grad_();
}

TEST(PolicyLoss, AtRatioOneTheGradientIsReinforce) {
  // old_logp == logp: r = 1 sits inside every clip, so d/dlogp of -r*A is -A * mask / normaliser.
  const Tensor adv = Tensor::from_vector<float>({0.7f, -1.3f, 2.f}, {kB});
  const Tensor mask = mask_of_lengths();
  const double normaliser = 11;
  for (PolicyLossOptions opts : {PolicyLossOptions{}, PolicyLossOptions{.clip_low = 0.1, .clip_high = 0.28},
                                 PolicyLossOptions{.dual_clip = 3}}) {
    Tensor logp = logp_leaf(1);
    PolicyLossStats stats;
    Tensor loss = rl::policy_loss(logp, logp.detach().clone(), adv, mask, Tensor(), opts, normaliser, &stats);
    // The loss is -sum(A * mask) / normaliser: 5 tokens of 0.7, 2 of -1.3.
    EXPECT_NEAR(loss.item(), -(5 * 0.7 - 2 * 1.3) / normaliser, 1e-6);
    loss.backward();
    const std::vector<float> g = logp.grad().to_vector<float>(), m = mask.to_vector<float>(),
                             a = adv.to_vector<float>();
    for (int64_t i = 0; i < kB * kT; ++i) EXPECT_NEAR(g[i], -a[i / kT] * m[i] / normaliser, 1e-7) << i;
    EXPECT_EQ(stats.tokens, 7);
    EXPECT_EQ(stats.clip_fraction, 0.0);
    EXPECT_NEAR(stats.ratio_mean, 1.0, 1e-12);
  }
}

TEST(PolicyLoss, ZeroAdvantagesWithoutKlGiveZeroGradient) {
  Tensor logp = logp_leaf(2);
  const Tensor old = test::rand_f32({kB, kT}, 3, -3, -0.1);
  const PolicyLossOptions opts{.clip_high = 0.28, .dual_clip = 3};
  Tensor loss = rl::policy_loss(logp, old, Tensor::zeros({kB}), mask_of_lengths(), Tensor(), opts, 7);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (float g : logp.grad().to_vector<float>()) EXPECT_EQ(g, 0.f);
}

TEST(PolicyLoss, GradientMatchesFiniteDifferences) {
  // f64, log-ratios within +-0.15 of zero or past +-0.5, so that no token sits on a clip's kink
  // (0.1 / 0.2 clips) where the two one-sided derivatives differ.
  std::vector<double> shift(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) shift[i] = (i % 3 == 0 ? 0.8 : 0.1) * (i % 2 ? 1 : -1);
  const Tensor logp = test::rand_f64({kB, kT}, 4, true, -3, -0.2);
  const Tensor old = (logp.detach() - Tensor::from_vector<double>(shift, {kB, kT})).contiguous();
  const Tensor ref = test::rand_f64({kB, kT}, 5, false, -3, -0.2);
  const Tensor adv = Tensor::from_vector<double>({0.9, -1.4, 0.3}, {kB});
  const Tensor mask = Tensor::from_vector<double>(std::vector<double>(kB * kT, 1.0), {kB, kT});
  const PolicyLossOptions opts{.clip_low = 0.1, .clip_high = 0.2, .dual_clip = 1.5, .kl_coef = 0.3};
  auto res = autograd::gradcheck(
      [&](auto& v) { return std::vector<Tensor>{rl::policy_loss(v[0], old, adv, mask, ref, opts, 9)}; },
      {logp});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(PolicyLoss, MaskedTokensAreSkippedWhateverTheirValues) {
  // Padding may hold anything (a NaN log-probability of a token that was never sampled).
  Tensor logp = Tensor::from_vector<float>({-1.f, NAN, -2.f, -INFINITY}, {2, 2}).requires_grad_();
  const Tensor old = Tensor::from_vector<float>({-1.1f, -1.f, NAN, -1.f}, {2, 2});
  const Tensor mask = Tensor::from_vector<float>({1.f, 0.f, 0.f, 0.f}, {2, 2});
  const Tensor ref = Tensor::from_vector<float>({-1.f, NAN, NAN, NAN}, {2, 2});
  Tensor loss =
      rl::policy_loss(logp, old, Tensor::from_vector<float>({1.f, 1.f}, {2}), mask, ref, {.kl_coef = 0.1}, 1);
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  const std::vector<float> g = logp.grad().to_vector<float>();
  EXPECT_TRUE(std::isfinite(g[0]));
  EXPECT_NE(g[0], 0.f);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(g[i], 0.f) << i;
}

TEST(PolicyLoss, BadInputsNameTheProblem) {
  const Tensor logp = logp_leaf(6), mask = mask_of_lengths(), adv = Tensor::zeros({kB});
  const Tensor old = logp.detach();
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask, Tensor(), {.kl_coef = 0.1}, 5), "kl_coef is 0.1",
                     "ref_logp is undefined", "set kl_coef = 0");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, Tensor::zeros({kB, kT + 1}), adv, mask, Tensor(), {}, 5),
                     "old_logp", "[3, 5]", "f32[3, 6]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, Tensor::zeros({kB, kT}), mask, Tensor(), {}, 5), "advantages",
                     "[3]", "f32[3, 5]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, Tensor::zeros({kB}), Tensor(), {}, 5), "mask", "[3, 5]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask, Tensor::zeros({kB}), {.kl_coef = 0.1}, 5),
                     "ref_logp", "[3, 5]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp.view({kB * kT}), old, adv, mask, Tensor(), {}, 5),
                     "logp must be [B, T]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask * 0.5, Tensor(), {}, 5), "mask must hold 0 or 1",
                     "0.5 at [0, 0]");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask, Tensor(), {}, 0), "normaliser", "got 0");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask, Tensor(), {.dual_clip = 1}, 5), "dual_clip",
                     "c > 1", "got 1");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old, adv, mask, Tensor(), {.clip_low = 1}, 5), "clip_low",
                     "[0, 1)");
  EXPECT_TITAN_ERROR(rl::policy_loss(logp, old.to(kI64), adv, mask, Tensor(), {}, 5), "old_logp",
                     "f32 or f64");
}

TEST(GroupAdvantages, CentresAndScalesEachGroup) {
  const std::vector<double> rewards = {1, 0, 0, 1, 0.1, 0.1, 0.1, 0.1};
  const std::vector<double> none = rl::group_advantages(rewards, 4, AdvantageNorm::none);
  EXPECT_EQ(none, (std::vector<double>{0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0}));
  // Population std of {1, 0, 0, 1} is 0.5; unbiased sqrt(1/3).
  const std::vector<double> pop = rl::group_advantages(rewards, 4, AdvantageNorm::std, 0);
  EXPECT_NEAR(pop[0], 1.0, 1e-15);
  const std::vector<double> unbiased = rl::group_advantages(rewards, 4, AdvantageNorm::unbiased_std, 0);
  EXPECT_NEAR(unbiased[1], -0.5 / std::sqrt(1.0 / 3), 1e-15);
  // A group of equal rewards (whose float mean is not exactly 0.1) has nothing to learn from.
  for (const auto& adv : {pop, unbiased})
    for (int i = 4; i < 8; ++i) EXPECT_EQ(adv[i], 0.0) << i;
}

TEST(GroupAdvantages, BadGroupsAreRefusedWithTheReason) {
  const std::vector<double> rewards = {1, 0, 1};
  EXPECT_TITAN_ERROR(rl::group_advantages(rewards, 1, AdvantageNorm::unbiased_std), "group of 1", "G - 1 = 0",
                     "at least 2 completions");
  EXPECT_TITAN_ERROR(rl::group_advantages(rewards, 2, AdvantageNorm::none), "3 rewards", "groups of 2");
  EXPECT_TITAN_ERROR(rl::group_advantages(rewards, 0, AdvantageNorm::none), "group_size", "got 0");
  EXPECT_EQ(rl::group_advantages(rewards, 1, AdvantageNorm::std), (std::vector<double>{0, 0, 0}));
}

}  // namespace
}  // namespace titan
