// titan's Qwen 3 vs the PyTorch twin (tests/parity/qwen3_torch.py): the same initial weights,
// loaded by TorchTitan's names, and the same 10 batches, trained through the trainer's own step
// (train::train_step: cross-entropy plus the model's auxiliary loss, AdamW, clipping, the model's
// end of step) on both sides. The first step's logits and gradients, every step's loss (auxiliary
// loss included) and grad norm, and for MoE every step's auxiliary loss and the expert biases
// after the last step must agree to 1e-4 (relative, f32).
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/models/qwen3/model.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/train/trainer.h"

namespace titan::test {
namespace {

using models::qwen3::ModelArgs;
using models::qwen3::Transformer;

ModelArgs args_of(const ParityCase& c, bool moe) {
  auto size = [&](const char* key) { return static_cast<int64_t>(c.attr(key)); };
  ModelArgs a;
  a.dim = size("dim");
  a.n_layers = size("n_layers");
  a.n_heads = size("n_heads");
  a.n_kv_heads = size("n_kv_heads");
  a.head_dim = size("head_dim");
  a.ffn_dim = size("ffn_dim");
  a.vocab_size = size("vocab_size");
  a.max_seq_len = size("max_seq_len");
  a.rope_theta = c.attr("rope_theta");
  a.norm_eps = c.attr("norm_eps");
  a.tie_embeddings = size("tie_embeddings") != 0;
  if (moe) {
    a.moe = nn::moe::MoEArgs{.num_experts = size("num_experts"),
                             .top_k = size("top_k"),
                             .hidden_dim = size("hidden_dim"),
                             .norm_topk_prob = size("norm_topk_prob") != 0,
                             .load_balance_bias = size("load_balance_bias") != 0,
                             .bias_update_rate = c.attr("bias_update_rate")};
    a.aux_loss_coeff = c.attr("aux_loss_coeff");
  }
  return a;
}

void train_like_the_reference(const std::string& name, bool moe) {
  ParityCase c = load_parity_case(name);
  Transformer model(args_of(c, moe));
  c.load_initial_weights(model);
  const Tensor& tokens = c["in.tokens"];
  const Tensor& targets = c["in.targets"];
  auto batch = [&](int64_t s) {
    return data::Batch{tokens.narrow(0, s, 1).squeeze(0), targets.narrow(0, s, 1).squeeze(0)};
  };

  {
    // The first step's forward and backward on their own; in eval mode, so that it counts no
    // tokens towards the expert-bias update of the step train_step runs next.
    model.eval();
    data::Batch b = batch(0);
    Tensor logits = model(b.inputs);
    Tensor loss = ops::cross_entropy(logits, b.labels);
    if (Tensor aux = model.auxiliary_loss(); aux.defined()) loss = loss + aux;
    loss.backward();
    EXPECT_TRUE(tensors_close(logits, c["out.logits0"], 1e-4, "step 1 logits"));
    for (auto& [pname, p] : model.named_parameters())
      EXPECT_TRUE(tensors_close(p.grad(), c["grad." + pname], 1e-4, "step 1 gradient of " + pname));
    model.zero_grad();
    model.train();
  }

  optim::AdamW opt(model.named_parameters(), c.adamw_options());
  const int64_t steps = static_cast<int64_t>(c.attr("steps"));
  std::vector<double> losses, norms, aux_losses;
  for (int64_t s = 0; s < steps; ++s) {
    train::StepStats stats =
        train::train_step(model, opt, model.parameters(), c.attr("max_norm"), 1, [&] { return batch(s); });
    losses.push_back(stats.loss);
    norms.push_back(stats.grad_norm);
    for (const auto& [key, value] : stats.extra)
      if (key == "aux_loss") aux_losses.push_back(value);
  }
  EXPECT_TRUE(tensors_close(Tensor::from_vector(losses, {steps}), c["out.loss"], 1e-4, "per-step losses"));
  EXPECT_TRUE(
      tensors_close(Tensor::from_vector(norms, {steps}), c["out.grad_norm"], 1e-4, "per-step grad norms"));
  if (!moe) {
    EXPECT_TRUE(aux_losses.empty());
    return;
  }
  ASSERT_EQ(static_cast<int64_t>(aux_losses.size()), steps);
  EXPECT_TRUE(tensors_close(Tensor::from_vector(aux_losses, {steps}), c["out.aux_loss"], 1e-4,
                            "per-step auxiliary losses"));
  for (auto& [bname, b] : model.named_buffers()) {
    if (!bname.ends_with("expert_bias")) continue;
    EXPECT_TRUE(tensors_close(b, c["out.final." + bname], 1e-4, "expert bias after the last step: " + bname));
  }
}

TEST(ParityQwen3, DenseTiedTenTrainingStepsMatchPyTorch) {
  train_like_the_reference("qwen3_dense_train_tiny", false);
}

TEST(ParityQwen3, MoETenTrainingStepsMatchPyTorch) {
  train_like_the_reference("qwen3_moe_train_tiny", true);
}

}  // namespace
}  // namespace titan::test
