// titan's Llama 3 vs the PyTorch twin (tests/parity/llama3_torch.py): the same initial weights,
// loaded by TorchTitan's names, and the same 20 batches, trained with AdamW and grad-norm
// clipping on both sides. The first step's logits and gradients and every step's loss and grad
// norm must agree to 1e-4 (relative, f32).
#include <gtest/gtest.h>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/models/llama3/model.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/optim/clip.h"

namespace titan::test {
namespace {

using models::llama3::ModelArgs;
using models::llama3::Transformer;

ModelArgs args_of(const ParityCase& c) {
  auto size = [&](const char* key) { return static_cast<int64_t>(c.attr(key)); };
  ModelArgs a;
  a.dim = size("dim");
  a.n_layers = size("n_layers");
  a.n_heads = size("n_heads");
  a.n_kv_heads = size("n_kv_heads");
  a.vocab_size = size("vocab_size");
  a.multiple_of = size("multiple_of");
  a.max_seq_len = size("max_seq_len");
  a.rope_theta = c.attr("rope_theta");
  return a;
}

TEST(ParityLlama3, TwentyTrainingStepsMatchPyTorch) {
  ParityCase c = load_parity_case("llama3_train_tiny");
  Transformer model(args_of(c));
  c.load_initial_weights(model);

  optim::AdamW opt(model.named_parameters(), c.adamw_options());
  const int64_t steps = static_cast<int64_t>(c.attr("steps"));
  const Tensor& tokens = c["in.tokens"];
  const Tensor& targets = c["in.targets"];
  std::vector<double> losses, norms;
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor logits = model(tokens.narrow(0, s, 1).squeeze(0));
    Tensor loss = ops::cross_entropy(logits, targets.narrow(0, s, 1).squeeze(0));
    loss.backward();
    if (s == 0) {
      EXPECT_TRUE(tensors_close(logits, c["out.logits0"], 1e-4, "step 1 logits"));
      for (auto& [name, p] : model.named_parameters())
        EXPECT_TRUE(tensors_close(p.grad(), c["grad." + name], 1e-4, "step 1 gradient of " + name));
    }
    norms.push_back(optim::clip_grad_norm_(model.parameters(), c.attr("max_norm")));
    opt.step();
    losses.push_back(loss.item());
  }
  EXPECT_TRUE(tensors_close(Tensor::from_vector(losses, {steps}), c["out.loss"], 1e-4, "per-step losses"));
  EXPECT_TRUE(
      tensors_close(Tensor::from_vector(norms, {steps}), c["out.grad_norm"], 1e-4, "per-step grad norms"));
}

}  // namespace
}  // namespace titan::test
