// Qwen 3: flavors at their published sizes (parameter counts, active parameters, FLOPs), the module
// tree TorchTitan's qwen3 names, tied embeddings, causality, a gradcheck of the whole MoE model
// (router and auxiliary loss included), checkpointed blocks, the expert-load figures, and the
// registry's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "support/test_util.h"
#include "support/tiny_qwen3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/gradcheck.h"
#include "titan/models/qwen3/model.h"
#include "titan/models/registry.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan {
namespace {

using models::qwen3::Family;
using models::qwen3::ModelArgs;
using models::qwen3::Transformer;
using test::randomise;
using test::tensors_close;
using test::tokens_of;

// ---- flavors and sizes ------------------------------------------------------------------------

TEST(Qwen3Args, FlavorsAreThePublishedConfigs) {
  EXPECT_EQ(models::qwen3::flavor_names(Family::dense),
            (std::vector<std::string>{"debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B"}));
  EXPECT_EQ(models::qwen3::flavor_names(Family::moe),
            (std::vector<std::string>{"debugmodel", "30B-A3B", "235B-A22B"}));
  // dim, layers, q heads, kv heads, ffn, tied.
  const std::map<std::string, std::vector<int64_t>> dense = {
      {"0.6B", {1024, 28, 16, 8, 3072, 1}}, {"1.7B", {2048, 28, 16, 8, 6144, 1}},
      {"4B", {2560, 36, 32, 8, 9728, 1}},   {"8B", {4096, 36, 32, 8, 12288, 0}},
      {"14B", {5120, 40, 40, 8, 17408, 0}}, {"32B", {5120, 64, 64, 8, 25600, 0}}};
  for (const auto& [name, dims] : dense) {
    ModelArgs a = models::qwen3::flavor(Family::dense, name);
    EXPECT_EQ((std::vector<int64_t>{a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.ffn_dim, a.tie_embeddings}),
              dims)
        << name;
    EXPECT_FALSE(a.moe.has_value()) << name;
  }
  // dim, layers, q heads, kv heads, experts, top-k, expert ffn.
  const std::map<std::string, std::vector<int64_t>> sparse = {{"30B-A3B", {2048, 48, 32, 4, 128, 8, 768}},
                                                              {"235B-A22B", {4096, 94, 64, 4, 128, 8, 1536}}};
  for (const auto& [name, dims] : sparse) {
    ModelArgs a = models::qwen3::flavor(Family::moe, name);
    ASSERT_TRUE(a.moe.has_value()) << name;
    EXPECT_EQ((std::vector<int64_t>{a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.moe->num_experts,
                                    a.moe->top_k, a.moe->hidden_dim}),
              dims)
        << name;
    EXPECT_TRUE(a.moe->norm_topk_prob) << name;
    EXPECT_FALSE(a.tie_embeddings) << name;
  }
  for (Family f : {Family::dense, Family::moe})
    for (const std::string& name : models::qwen3::flavor_names(f)) {
      ModelArgs a = models::qwen3::flavor(f, name);
      a.validate();
      if (name == "debugmodel") continue;
      EXPECT_EQ(a.head_dim, 128) << name;
      EXPECT_EQ(a.vocab_size, 151936) << name;
      EXPECT_EQ(a.norm_eps, 1e-6) << name;
      EXPECT_EQ(a.rope_theta, 1e6) << name;
      EXPECT_EQ(a.max_seq_len, 40960) << name;
    }
  ModelArgs debug_moe = models::qwen3::flavor(Family::moe, "debugmodel");
  EXPECT_EQ(debug_moe.moe->num_experts, 8);
  EXPECT_EQ(debug_moe.moe->top_k, 2);
  EXPECT_NE(debug_moe.head_dim, debug_moe.dim / debug_moe.n_heads);
}

TEST(Qwen3Args, ParameterCountsAreThePublishedSizes) {
  // Qwen's model cards: 0.6B, 1.7B, 4.0B, 8.2B, 14.8B, 32.8B; 30.5B with 3.3B active, 235B with 22B.
  const std::map<std::string, int64_t> dense = {{"0.6B", 596049920},  {"1.7B", 1720574976},
                                                {"4B", 4022468096},   {"8B", 8190735360},
                                                {"14B", 14768307200}, {"32B", 32762123264}};
  for (const auto& [name, n] : dense)
    EXPECT_EQ(models::qwen3::summarize(models::qwen3::flavor(Family::dense, name), 4096).num_params, n)
        << name;
  models::ModelSummary a3b = models::qwen3::summarize(models::qwen3::flavor(Family::moe, "30B-A3B"), 4096);
  EXPECT_EQ(a3b.num_params, 30532122624);
  EXPECT_NE(a3b.description.find("3.35B active"), std::string::npos) << a3b.description;
  models::ModelSummary a22b = models::qwen3::summarize(models::qwen3::flavor(Family::moe, "235B-A22B"), 4096);
  EXPECT_EQ(a22b.num_params, 235093634560);
  EXPECT_NE(a22b.description.find("22.19B active"), std::string::npos) << a22b.description;
}

TEST(Qwen3Args, FlopsCountOnlyTheActiveParameters) {
  // 30B-A3B: per layer attention 2048 x (4096 + 2 x 512) + 4096 x 2048 + QK-norms, the router and
  // 8 of the 128 experts; the output projection; attention scores 12 x layers x q_dim x seq.
  const int64_t layer =
      2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 8 * 3 * 2048 * 768 + 2048 * 128 + 2 * 2048;
  const double expected =
      6.0 * static_cast<double>(48 * layer + 2048 + 151936 * 2048) + 12.0 * 48 * 4096 * 4096;
  EXPECT_DOUBLE_EQ(
      models::qwen3::summarize(models::qwen3::flavor(Family::moe, "30B-A3B"), 4096).flops_per_token,
      expected);
  // Tied: the output projection still costs its matmul, though its weight is the embedding's.
  ModelArgs tied = models::qwen3::flavor(Family::dense, "0.6B"), untied = tied;
  untied.tie_embeddings = false;
  EXPECT_DOUBLE_EQ(models::qwen3::summarize(tied, 2048).flops_per_token,
                   models::qwen3::summarize(untied, 2048).flops_per_token);
}

TEST(Qwen3Args, ValidationNamesTheProblem) {
  ModelArgs a = test::tiny_qwen3_args(false);
  a.n_kv_heads = 3;
  EXPECT_TITAN_ERROR(a.validate(), "n_heads (4)", "n_kv_heads (3)");
  a = test::tiny_qwen3_args(false);
  a.head_dim = 5;
  EXPECT_TITAN_ERROR(a.validate(), "head_dim", "even");
  a = test::tiny_qwen3_args(true);
  a.moe->top_k = 5;
  EXPECT_TITAN_ERROR(a.validate(), "top_k=5", "num_experts=4");
  EXPECT_TITAN_ERROR(models::qwen3::flavor(Family::dense, "30B-A3B"), "unknown flavor '30B-A3B'",
                     "qwen3_moe");
}

// ---- the model ----------------------------------------------------------------------------------

TEST(Qwen3Model, ParameterNamesAreTorchTitans) {
  ModelArgs dense = test::tiny_qwen3_args(false);
  dense.tie_embeddings = true;
  std::set<std::string> names;
  for (auto& [name, t] : Transformer(dense).state_dict()) names.insert(name);
  for (const char* n :
       {"tok_embeddings.weight", "layers.0.attention.wq.weight", "layers.0.attention.q_norm.weight",
        "layers.0.attention.k_norm.weight", "layers.1.feed_forward.w2.weight",
        "layers.1.attention_norm.weight", "layers.1.ffn_norm.weight", "norm.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("output.weight")) << "a tied model has no output projection of its own";

  ModelArgs sparse = test::tiny_qwen3_args(true);
  sparse.moe->load_balance_bias = true;
  Transformer moe(sparse);
  names.clear();
  for (auto& [name, t] : moe.state_dict()) names.insert(name);
  for (const char* n :
       {"layers.0.moe.router.gate.weight", "layers.0.moe.experts.w1", "layers.0.moe.experts.w2",
        "layers.1.moe.experts.w3", "layers.1.moe.router.expert_bias", "output.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("layers.0.feed_forward.w1.weight"));
  // Shapes: head_dim 4 for 4 and 2 heads; experts stacked as [experts, out, in].
  auto params = moe.named_parameters();
  std::map<std::string, Tensor> p(params.begin(), params.end());
  EXPECT_EQ(p.at("layers.0.attention.wq.weight").sizes(), (Shape{16, 6}));
  EXPECT_EQ(p.at("layers.0.attention.wk.weight").sizes(), (Shape{8, 6}));
  EXPECT_EQ(p.at("layers.0.attention.q_norm.weight").sizes(), (Shape{4}));
  EXPECT_EQ(p.at("layers.0.moe.experts.w1").sizes(), (Shape{4, 5, 6}));
  EXPECT_EQ(p.at("layers.0.moe.experts.w2").sizes(), (Shape{4, 6, 5}));
  EXPECT_EQ(moe.state_dict().at("layers.1.moe.router.expert_bias").sizes(), (Shape{4}));
}

TEST(Qwen3Model, TiedEmbeddingIsTheOutputProjectionAndStartsAtItsScale) {
  ModelArgs a = test::tiny_qwen3_args(false);
  a.tie_embeddings = true;
  a.dim = 64;
  a.n_heads = 2;
  a.n_kv_heads = 1;
  a.head_dim = 16;
  Transformer m(a);
  Generator gen(3);
  m.init_weights(gen);
  // std dim^-0.5 = 0.125, cut at 3 std: the output projection's init, not the embedding's N(0, 1).
  std::vector<float> w = m.tok_embeddings->weight.to_vector<float>();
  double sq = 0, peak = 0;
  for (float v : w) sq += v * v, peak = std::max(peak, static_cast<double>(std::abs(v)));
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), 0.125, 0.02);
  EXPECT_LE(peak, 3 * 0.125 + 1e-6);
  // One tensor, trained once: its gradient gathers the lookup's and the projection's.
  Tensor tokens = tokens_of({1, 5, 2, 9}, 1);
  ops::cross_entropy(m(tokens), tokens_of({5, 2, 9, 0}, 1)).backward();
  EXPECT_TRUE(m.tok_embeddings->weight.grad().defined());
}

TEST(Qwen3Model, LogitsAreCausal) {
  for (bool moe : {false, true}) {
    Transformer m(test::tiny_qwen3_args(moe));
    randomise(m, 4);
    Tensor a = m(tokens_of({1, 5, 2, 9, 0, 3}, 1)), b = m(tokens_of({1, 5, 2, 9, 7, 7}, 1));
    EXPECT_EQ(a.sizes(), (Shape{1, 6, 11}));
    // Dense blocks give the first positions bit for bit. With experts the later tokens change how
    // many tokens each expert gets, so the experts' GEMMs take other shapes, and BLAS rounds a row
    // by the shape it is part of (a lone row goes to GEMV, blocking follows the sizes).
    EXPECT_TRUE(tensors_close(a.narrow(1, 0, 4), b.narrow(1, 0, 4), moe ? 1e-6 : 0, "the first 4 positions"))
        << moe;
    EXPECT_GT(test::max_rel_error(a.narrow(1, 4, 2), b.narrow(1, 4, 2)), 1e-3) << moe;
  }
}

TEST(Qwen3Model, GradcheckOfTheLossWithRespectToParameters) {
  for (bool moe : {false, true}) {
    Transformer m(test::tiny_qwen3_args(moe), {.dtype = kF64});
    randomise(m, 5);
    auto named = m.named_parameters();
    std::map<std::string, Tensor> params(named.begin(), named.end());
    std::vector<std::string> names = {"layers.0.attention.wq.weight", "layers.0.attention.q_norm.weight",
                                      "layers.1.attention.k_norm.weight", "norm.weight"};
    if (moe) {
      names.insert(names.end(), {"layers.0.moe.router.gate.weight", "layers.1.moe.router.gate.weight",
                                 "layers.0.moe.experts.w1", "layers.1.moe.experts.w2"});
    } else {
      names.push_back("layers.1.feed_forward.w3.weight");
    }
    std::vector<Tensor> leaves;
    for (const std::string& n : names) leaves.push_back(params.at(n));
    Tensor tokens = tokens_of({1, 5, 2, 9, 0, 3, 7, 4, 4, 10}, 2);
    Tensor targets = tokens_of({5, 2, 9, 0, 3, 7, 1, 4, 10, 6}, 2);
    auto res = autograd::gradcheck(
        [&](const std::vector<Tensor>&) {
          Tensor loss = ops::cross_entropy(m(tokens), targets);
          if (Tensor aux = m.auxiliary_loss(); aux.defined()) loss = loss + aux;
          return std::vector<Tensor>{loss};
        },
        leaves);
    EXPECT_TRUE(res.ok) << (moe ? "moe: " : "dense: ") << res.message;
  }
}

TEST(Qwen3Model, CheckpointedBlocksGiveTheSameGradientsAuxiliaryLossIncluded) {
  std::vector<std::map<std::string, Tensor>> grads;
  for (const char* mode : {"none", "full"}) {
    Transformer m(test::tiny_qwen3_args(true));
    randomise(m, 6);
    parallel::apply_activation_checkpointing(*m.layers, parallel::parse_activation_checkpoint_mode(mode));
    Tensor loss = ops::cross_entropy(m(tokens_of({1, 5, 2, 9, 0, 3}, 1)), tokens_of({5, 2, 9, 0, 3, 7}, 1));
    (loss + m.auxiliary_loss()).backward();
    std::map<std::string, Tensor> g;
    for (auto& [name, p] : m.named_parameters()) g[name] = p.grad();
    grads.push_back(g);
  }
  for (auto& [name, g] : grads[0]) EXPECT_TRUE(tensors_close(grads[1].at(name), g, 0, name));
}

TEST(Qwen3Model, EndStepReportsTheExpertLoadOfTrainingForwards) {
  Transformer dense(test::tiny_qwen3_args(false));
  dense(tokens_of({1, 2, 3}, 1));
  EXPECT_TRUE(dense.end_step().empty());
  EXPECT_FALSE(dense.auxiliary_loss().defined());

  Transformer m(test::tiny_qwen3_args(true));
  randomise(m, 7);
  m(tokens_of({1, 5, 2, 9, 0, 3, 7, 4}, 2));
  m(tokens_of({4, 4, 10, 6}, 1));
  models::NamedScalars figures = m.end_step();
  ASSERT_EQ(figures.size(), 3u);
  EXPECT_EQ(figures[0].first, "moe/tokens_min");
  EXPECT_EQ(figures[1].first, "moe/tokens_max");
  EXPECT_EQ(figures[2].first, "moe/tokens_cv");
  // 12 tokens x 2 choices over 4 experts per layer.
  EXPECT_LE(figures[0].second, 6);
  EXPECT_GE(figures[1].second, 6);
  EXPECT_LE(figures[1].second, 12);
  EXPECT_GE(figures[2].second, 0);
  EXPECT_TRUE(m.end_step().empty()) << "the counts start afresh";
}

// ---- registry -----------------------------------------------------------------------------------

TEST(Qwen3Registry, BuildsBothFamiliesWithOverrides) {
  Generator gen(0);
  const auto& dense = models::get_train_spec("qwen3");
  auto m = dense.build({.name = "qwen3", .flavor = "debugmodel", .vocab_size = 300, .weight_tying = true}, 16,
                       gen);
  EXPECT_EQ(m->vocab_size(), 300);
  EXPECT_EQ(dynamic_cast<Transformer&>(*m).output, nullptr);
  const auto& moe = models::get_train_spec("qwen3_moe");
  auto s = moe.build({.name = "qwen3_moe",
                      .flavor = "debugmodel",
                      .moe = {.aux_loss_coeff = 0.05, .load_balance_bias = true}},
                     16, gen);
  const ModelArgs& args = dynamic_cast<Transformer&>(*s).args();
  EXPECT_EQ(args.aux_loss_coeff, 0.05);
  EXPECT_TRUE(args.moe->load_balance_bias);
  EXPECT_NE(
      moe.summarize({.name = "qwen3_moe", .flavor = "30B-A3B"}, 4096).description.find("qwen3_moe 30B-A3B"),
      std::string::npos);
}

TEST(Qwen3Registry, ErrorsSayWhatToDo) {
  Generator gen(0);
  const auto& dense = models::get_train_spec("qwen3");
  EXPECT_TITAN_ERROR(dense.build({.flavor = "7B"}, 16, gen), "unknown flavor '7B'", "0.6B", "32B");
  EXPECT_TITAN_ERROR(dense.build({.flavor = "debugmodel", .attention = "flash"}, 16, gen), "model.attention",
                     "splash");
  EXPECT_TITAN_ERROR(models::get_train_spec("qwen3_moe").summarize({.flavor = "8B"}, 16),
                     "unknown flavor '8B'", "30B-A3B", "model.name = \"qwen3\"");
}

}  // namespace
}  // namespace titan
