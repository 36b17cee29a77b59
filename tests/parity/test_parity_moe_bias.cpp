// titan's auxiliary-loss-free expert bias against the paper's rule (tests/parity/cases_moe_bias.py),
// which transformers' Qwen 3 MoE lacks: an MoE layer with the reference's gate, run in training
// mode on 10 batches with end_step after each, must choose experts as the reference does (every
// step's tokens per expert, exactly), take the Switch loss of that choice (1e-5 relative), and
// move its biases as the reference's after every step (1e-5: one float32 addition per step apart).
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/nn/moe/moe.h"

namespace titan::test {
namespace {

TEST(ParityMoEBias, ExpertBiasSteersTheChoiceAsTheReference) {
  const ParityCase c = load_parity_case("moe_expert_bias");
  const Tensor& gate = c["in.gate"];
  const Tensor& x = c["in.x"];
  const int64_t steps = x.size(0), experts = gate.size(0);
  nn::moe::MoE moe(0, gate.size(1),
                   {.num_experts = experts,
                    .top_k = static_cast<int64_t>(c.attr("top_k")),
                    .hidden_dim = 4,
                    .load_balance_bias = true,
                    .bias_update_rate = c.attr("rate")},
                   0.02);
  Generator gen(3);
  moe.init_weights(gen);
  {
    autograd::NoGradGuard no_grad;
    moe.router->gate->weight.copy_(gate);
  }
  moe.train();
  const std::vector<int64_t> want_counts = c["out.counts"].to_vector<int64_t>();
  for (int64_t s = 0; s < steps; ++s) {
    auto pass = std::make_shared<nn::moe::MoEPass>();
    pass->aux_loss_weight = 1.0;
    moe(x.narrow(0, s, 1).squeeze(0), pass);
    EXPECT_NEAR(pass->aux_losses.total().item(), c["out.aux_loss"].narrow(0, s, 1).item(), 1e-5) << "step " << s;
    const std::vector<int64_t> counts = moe.end_step();
    EXPECT_EQ(counts, std::vector<int64_t>(want_counts.begin() + s * experts, want_counts.begin() + (s + 1) * experts))
        << "tokens per expert, step " << s;
    EXPECT_TRUE(tensors_close(moe.router->expert_bias, c["out.bias"].narrow(0, s, 1).squeeze(0), 1e-5,
                              "expert bias after step " + std::to_string(s)));
  }
}

}  // namespace
}  // namespace titan::test
