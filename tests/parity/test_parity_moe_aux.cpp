// titan's global MoE load-balancing loss ([moe] load_balance_loss = "global") vs transformers'
// load_balancing_loss_func (tests/parity/cases_moe_aux.py), f32: the loss and its gradients to
// 1e-5 (relative to the reference's largest magnitude), with and without activation checkpointing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/qwen3/model.h"
#include "titan/nn/moe/moe.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan::test {
namespace {

constexpr double kTol = 1e-5;

// Each layer's router fed its reference tokens through MoE layers sharing one pass, as a model's
// blocks do; the layers' outputs join the objective with weight 0, so that their attach nodes run.
void check_layers(const std::string& name, bool checkpointed) {
  ParityCase c = load_parity_case(name);
  const auto layers = static_cast<int64_t>(c.attr("layers"));
  const nn::moe::MoEArgs args{.num_experts = static_cast<int64_t>(c.attr("experts")),
                              .top_k = static_cast<int64_t>(c.attr("top_k")),
                              .hidden_dim = 4};
  auto pass = std::make_shared<nn::moe::MoEPass>();
  pass->aux_loss_weight = 1;
  pass->load_balance_loss = nn::moe::LoadBalanceLoss::global;
  std::vector<std::shared_ptr<nn::moe::MoE>> moes;
  Tensor outputs;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor& x = c["in.x" + std::to_string(l)];
    auto moe = std::make_shared<nn::moe::MoE>(l, x.size(1), args, 0.02);
    {
      autograd::NoGradGuard no_grad;
      moe->router->gate->weight.copy_(c["in.w" + std::to_string(l)]);
    }
    auto body = [moe, pass](const Tensor& in) { return (*moe)(in, pass); };
    Tensor in = c.input("in.x" + std::to_string(l));
    Tensor y = ops::sum(checkpointed ? autograd::checkpoint(body, in) : body(in));
    outputs = outputs.defined() ? outputs + y : y;
    moes.push_back(moe);
  }
  Tensor loss = pass->aux_losses.total();
  const std::string what = name + (checkpointed ? " checkpointed" : "");
  EXPECT_TRUE(tensors_close(loss, c["out.loss"], kTol, what + " loss"));
  (loss * c["cot.loss"].item() + outputs * 0.0).backward();
  for (int64_t l = 0; l < layers; ++l)
    EXPECT_TRUE(tensors_close(moes[l]->router->gate->weight.grad(), c["grad.w" + std::to_string(l)], kTol,
                              what + " gradient of router " + std::to_string(l)));
}

TEST(ParityMoEAux, GlobalLossIsTransformersLoadBalancingLossFunc) {
  for (const char* name : {"moe_aux_global", "moe_aux_global_top3"})
    for (bool checkpointed : {false, true}) check_layers(name, checkpointed);
}

models::qwen3::ModelArgs qwen3_args(const ParityCase& c) {
  auto size = [&](const char* key) { return static_cast<int64_t>(c.attr(key)); };
  models::qwen3::ModelArgs a;
  a.dim = size("hidden_size");
  a.n_layers = size("num_hidden_layers");
  a.n_heads = size("num_attention_heads");
  a.n_kv_heads = size("num_key_value_heads");
  a.head_dim = size("head_dim");
  a.ffn_dim = size("intermediate_size");
  a.vocab_size = size("vocab_size");
  a.max_seq_len = size("max_position_embeddings");
  a.norm_eps = c.attr("rms_norm_eps");
  a.rope_theta = c.attr("rope_theta");
  a.tie_embeddings = size("tie_word_embeddings") != 0;
  a.moe = nn::moe::MoEArgs{.num_experts = size("num_experts"),
                           .top_k = size("num_experts_per_tok"),
                           .hidden_dim = size("moe_intermediate_size"),
                           .norm_topk_prob = size("norm_topk_prob") != 0};
  a.aux_loss_coeff = c.attr("router_aux_loss_coef");
  a.load_balance_loss = nn::moe::LoadBalanceLoss::global;
  return a;
}

// Qwen3MoeForCausalLM's router_aux_loss_coef * aux_loss (output_router_logits=True) for the same
// weights and tokens: the model's auxiliary_loss() and its gradient with respect to every
// parameter, the blocks checkpointed or not.
TEST(ParityMoEAux, Qwen3MoeAuxiliaryLossIsTransformers) {
  ParityCase c = load_parity_case("moe_aux_global_qwen3");
  for (const char* mode : {"none", "full"}) {
    models::qwen3::Transformer model(qwen3_args(c));
    c.load_initial_weights(model);
    parallel::apply_activation_checkpointing(*model.layers, parallel::parse_activation_checkpoint_mode(mode));
    Tensor logits = model(c["in.tokens"], Tensor());
    Tensor aux = model.auxiliary_loss();
    ASSERT_TRUE(aux.defined()) << mode;
    EXPECT_TRUE(tensors_close(aux, c["out.aux_loss"] * c.attr("router_aux_loss_coef"), kTol,
                              std::string(mode) + ": auxiliary loss"));
    (aux + ops::sum(logits) * 0.0).backward();
    for (auto& [name, p] : model.named_parameters()) {
      const Tensor& ref = c["grad." + name];
      Tensor grad = p.grad().defined() ? p.grad() : Tensor::zeros(ref.sizes());
      EXPECT_TRUE(tensors_close(grad, ref, kTol, std::string(mode) + ": gradient of " + name));
    }
  }
}

}  // namespace
}  // namespace titan::test
