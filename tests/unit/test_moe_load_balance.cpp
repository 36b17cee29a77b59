// The load-balancing loss's scope ([moe] load_balance_loss): the config key and its validation,
// the global loss's value at an even load, a gradient check of it through a Qwen 3 MoE model, its
// gradients with and without activation checkpointing, and its pooling per forward under
// gradient accumulation. Its values and gradients against transformers are in
// tests/parity/test_parity_moe_aux.cpp.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/test_util.h"
#include "support/tiny_qwen3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/gradcheck.h"
#include "titan/models/qwen3/model.h"
#include "titan/models/registry.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/activation_checkpoint.h"
#include "titan/train/config/job_config.h"
#include "titan/train/step/eager_step.h"

namespace titan {
namespace {

using models::qwen3::ModelArgs;
using models::qwen3::Transformer;
using nn::moe::LoadBalanceLoss;
using test::randomise;
using test::tensors_close;
using test::tokens_of;

// Three MoE blocks of 4 experts, 2 per token.
ModelArgs tiny_moe(LoadBalanceLoss loss) {
  ModelArgs a = test::tiny_qwen3_args(true, 3);
  a.load_balance_loss = loss;
  return a;
}

TEST(LoadBalanceLoss, ConfigKeyChoosesTheScopeAndRefusesOthers) {
  EXPECT_EQ(train::parse_job_config("", "test.toml", {}).model.moe.load_balance_loss, "per_layer");
  EXPECT_EQ(train::parse_job_config("", "test.toml", {"--moe.load_balance_loss=global"})
                .model.moe.load_balance_loss,
            "global");
  EXPECT_TITAN_ERROR(train::parse_job_config("", "test.toml", {"--moe.load_balance_loss=pooled"}),
                     "per_layer", "global");
  EXPECT_EQ(nn::moe::load_balance_loss_from_name("global"), LoadBalanceLoss::global);
  EXPECT_EQ(nn::moe::load_balance_loss_from_name("per_layer"), LoadBalanceLoss::per_layer);
  EXPECT_TITAN_ERROR(nn::moe::load_balance_loss_from_name("pooled"), "'pooled'", "\"per_layer\"",
                     "\"global\"");
  // The model the trainer builds reads it.
  models::ModelConfig cfg{.name = "qwen3_moe", .moe = {.load_balance_loss = "global"}};
  Generator gen(1);
  auto per_layer =
      models::get_train_spec("qwen3_moe").build(models::ModelConfig{.name = "qwen3_moe"}, 16, gen);
  auto global = models::get_train_spec("qwen3_moe").build(cfg, 16, gen);
  EXPECT_EQ(dynamic_cast<Transformer&>(*per_layer).args().load_balance_loss, LoadBalanceLoss::per_layer);
  EXPECT_EQ(dynamic_cast<Transformer&>(*global).args().load_balance_loss, LoadBalanceLoss::global);
}

TEST(LoadBalanceLoss, GlobalIsTopKWhenEveryScoreIsEven) {
  // Zero gates score every expert 1/E: P_e = 1/E, and the choices of all layers sum to k per
  // token, so E * sum_e f_e P_e = k (per_layer: 1), times the coefficient.
  for (LoadBalanceLoss loss : {LoadBalanceLoss::per_layer, LoadBalanceLoss::global}) {
    Transformer m(tiny_moe(loss));
    randomise(m, 3);
    {
      autograd::NoGradGuard no_grad;
      for (const auto& layer : *m.layers) layer->moe->router->gate->weight.zero_();
    }
    m(tokens_of({1, 5, 2, 9, 0, 3}, 2), Tensor());
    const double expected = loss == LoadBalanceLoss::global ? 2.0 : 1.0;
    EXPECT_NEAR(m.auxiliary_loss().item(), 0.5 * expected, 1e-6);
  }
}

TEST(LoadBalanceLoss, GlobalGradcheckThroughTheModel) {
  Transformer m(tiny_moe(LoadBalanceLoss::global), {.dtype = kF64});
  randomise(m, 4);
  auto named = m.named_parameters();
  std::map<std::string, Tensor> params(named.begin(), named.end());
  std::vector<Tensor> leaves;
  for (const char* n :
       {"layers.0.moe.router.gate.weight", "layers.1.moe.router.gate.weight",
        "layers.2.moe.router.gate.weight", "layers.0.attention.wq.weight", "layers.1.moe.experts.w1"})
    leaves.push_back(params.at(n));
  Tensor tokens = tokens_of({1, 5, 2, 9, 0, 3, 7, 4, 4, 10}, 2);
  Tensor targets = tokens_of({5, 2, 9, 0, 3, 7, 1, 4, 10, 6}, 2);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>&) {
        Tensor loss = ops::cross_entropy(m(tokens, Tensor()), targets);  // before auxiliary_loss()
        return std::vector<Tensor>{loss + m.auxiliary_loss()};
      },
      leaves);
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(LoadBalanceLoss, GlobalGivesTheSameGradientsThroughCheckpointedBlocks) {
  std::vector<std::map<std::string, Tensor>> grads;
  std::vector<double> aux;
  for (const char* mode : {"none", "full", "selective"}) {
    Transformer m(tiny_moe(LoadBalanceLoss::global));
    randomise(m, 6);
    parallel::apply_activation_checkpointing(*m.layers, parallel::parse_activation_checkpoint_mode(mode), 2);
    Tensor loss =
        ops::cross_entropy(m(tokens_of({1, 5, 2, 9, 0, 3}, 1), Tensor()), tokens_of({5, 2, 9, 0, 3, 7}, 1));
    Tensor a = m.auxiliary_loss();
    aux.push_back(a.item());
    (loss + a).backward();
    std::map<std::string, Tensor> g;
    for (auto& [name, p] : m.named_parameters()) g[name] = p.grad();
    grads.push_back(g);
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(aux[i], aux[0]);
    for (auto& [name, g] : grads[0]) EXPECT_TRUE(tensors_close(grads[i].at(name), g, 0, name));
  }
}

TEST(LoadBalanceLoss, GlobalPoolsEachForwardOfAnAccumulatedStep) {
  // Like transformers, each forward (micro-batch) pools its own layers; the step's aux_loss is
  // the mean of the micro-batches' losses.
  Transformer m(tiny_moe(LoadBalanceLoss::global));
  randomise(m, 7);
  const std::vector<data::Batch> batches = {{tokens_of({1, 5, 2, 9}, 1), tokens_of({5, 2, 9, 0}, 1)},
                                            {tokens_of({7, 4, 4, 10}, 1), tokens_of({4, 4, 10, 6}, 1)}};
  double expected = 0;
  for (const data::Batch& b : batches) {
    autograd::NoGradGuard no_grad;
    m(b.inputs, Tensor());
    expected += m.auxiliary_loss().item() / 2;
  }
  optim::AdamW opt(m.named_parameters());
  size_t next = 0;
  train::StepStats stats = train::train_step(m, opt, m.parameters(), 1.0, 2, [&] { return batches[next++]; });
  ASSERT_FALSE(stats.extra.empty());
  EXPECT_EQ(stats.extra.front().first, "aux_loss");
  EXPECT_NEAR(stats.extra.front().second, expected, 1e-6);
}

}  // namespace
}  // namespace titan
