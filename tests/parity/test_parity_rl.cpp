// titan vs PyTorch: GRPO's numerical core (cases_rl.py). Token log-probabilities and entropies at a
// temperature, group advantages, and the clipped policy loss with its statistics, forward and
// gradients. Bound: 1e-5 relative to the reference's largest magnitude, as test_parity_loss.cpp.
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/ops/token_log_probs.h"
#include "titan/rl/policy_loss.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

TEST(ParityRl, TokenLogProbs) {
  for (const char* name :
       {"tlp_129_t1", "tlp_5000_3d_i32_t07", "tlp_32000_t13", "tlp_100003_few_rows_t06", "tlp_all_ignored"}) {
    ParityCase c = load_parity_case(name);
    Tensor x = c.input("in.x");
    Tensor lp = ops::token_log_probs(x, c["in.t"], c.attr("temperature"),
                                     static_cast<int64_t>(c.attr("ignore_index")));
    EXPECT_TRUE(tensors_close(lp, c["out.logp"], kTol, std::string(name) + " forward"));
    lp.backward(c["cot.logp"]);
    EXPECT_TRUE(tensors_close(x.grad(), c["grad.x"], kTol, std::string(name) + " grad x"));
  }
}

TEST(ParityRl, TokenEntropy) {
  for (const char* name :
       {"entropy_129_t1", "entropy_5000_3d_t07_masked", "entropy_32000_t13", "entropy_100003_t06"}) {
    ParityCase c = load_parity_case(name);
    Tensor h = ops::token_entropy(c["in.x"], c.attr("temperature"));
    EXPECT_TRUE(tensors_close(h, c["out.h"], kTol, name));
  }
}

TEST(ParityRl, GroupAdvantages) {
  for (const char* name : {"adv_none_binary", "adv_std_binary", "adv_unbiased_binary", "adv_none_normal",
                           "adv_std_normal", "adv_unbiased_normal", "adv_std_group_of_one"}) {
    ParityCase c = load_parity_case(name);
    const std::vector<double> rewards = c["in.rewards"].to_vector<double>();
    const auto norm = static_cast<rl::AdvantageNorm>(static_cast<int>(c.attr("norm")));
    const std::vector<double> adv =
        rl::group_advantages(rewards, static_cast<int64_t>(c.attr("group_size")), norm, c.attr("eps"));
    const Tensor got = Tensor::from_vector<double>(adv, {static_cast<int64_t>(adv.size())});
    EXPECT_TRUE(tensors_close(got, c["out.adv"], kTol, name));
  }
}

TEST(ParityRl, PolicyLoss) {
  for (const char* name : {"pl_symmetric", "pl_asymmetric", "pl_dual_clip", "pl_kl", "pl_kl_dual_clip",
                           "pl_ref_without_kl", "pl_tight_clamp", "pl_tight_clamp_dual_clip"}) {
    ParityCase c = load_parity_case(name);
    const rl::PolicyLossOptions opts{.clip_low = c.attr("clip_low"),
                                     .clip_high = c.attr("clip_high"),
                                     .dual_clip = c.attr("dual_clip"),
                                     .kl_coef = c.attr("kl_coef"),
                                     .log_ratio_clamp = c.attr("log_ratio_clamp")};
    const Tensor ref = c.file.tensors.count("in.ref") ? c["in.ref"] : Tensor();
    Tensor logp = c.input("in.logp");
    rl::PolicyLossStats stats;
    Tensor loss = rl::policy_loss(logp, c["in.old_logp"], c["in.adv"], c["in.mask"], ref, opts,
                                  c.attr("normaliser"), &stats);
    EXPECT_TRUE(tensors_close(loss, c["out.loss"], kTol, std::string(name) + " forward"));
    loss.backward(c["cot.loss"]);
    EXPECT_TRUE(tensors_close(logp.grad(), c["grad.logp"], kTol, std::string(name) + " grad logp"));
    EXPECT_EQ(stats.tokens, static_cast<int64_t>(c["out.tokens"].item())) << name;
    EXPECT_NEAR(stats.clip_fraction, c["out.clip_fraction"].item(), 1e-12) << name;
    EXPECT_NEAR(stats.ratio_mean, c["out.ratio_mean"].item(), kTol * std::abs(c["out.ratio_mean"].item()))
        << name;
    EXPECT_NEAR(stats.kl_mean, c["out.kl_mean"].item(), kTol * std::abs(c["out.kl_mean"].item())) << name;
  }
}

}  // namespace
}  // namespace titan::test
