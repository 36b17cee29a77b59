// Llama 3: flavors and the sizes they imply, the module tree TorchTitan's checkpoints expect,
// TorchTitan's initialisation, causality, the reference attention path (gradcheck and a composed
// reimplementation), and the registry's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/attention/reference.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/gradcheck.h"
#include "titan/models/llama3/model.h"
#include "titan/models/registry.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using attention::attention_reference;
using attention::AttentionOptions;
using models::llama3::ModelArgs;
using models::llama3::Transformer;
using test::rand_f64;
using test::tensors_close;

ModelArgs tiny_args() { return test::tiny_llama3_args(); }

Tensor tokens_of(const std::vector<int64_t>& ids, int64_t batch) {
  return Tensor::from_vector(ids, {batch, static_cast<int64_t>(ids.size()) / batch});
}

// ---- flavors and sizes ------------------------------------------------------------------------

TEST(Llama3Args, FlavorsMatchMetaAndTorchTitan) {
  using models::llama3::flavor;
  EXPECT_EQ(models::llama3::flavor_names(),
            (std::vector<std::string>{"debugmodel", "1B", "3B", "8B", "70B", "405B"}));
  for (const std::string& name : models::llama3::flavor_names()) {
    ModelArgs a = flavor(name);
    a.validate();
    EXPECT_EQ(a.rope_theta, 500000) << name;
    EXPECT_EQ(a.norm_eps, 1e-5) << name;
    EXPECT_TRUE(a.use_scaled_rope) << name;
  }
  ModelArgs d = flavor("debugmodel");
  EXPECT_EQ(std::vector<int64_t>({d.dim, d.n_layers, d.n_heads, d.n_kv_heads, d.vocab_size, d.multiple_of}),
            std::vector<int64_t>({256, 6, 16, 16, 2048, 256}));
  EXPECT_FALSE(d.ffn_dim_multiplier.has_value());
  ModelArgs b8 = flavor("8B");
  EXPECT_EQ(
      std::vector<int64_t>({b8.dim, b8.n_layers, b8.n_heads, b8.n_kv_heads, b8.vocab_size, b8.multiple_of}),
      std::vector<int64_t>({4096, 32, 32, 8, 128256, 1024}));
  EXPECT_EQ(b8.ffn_dim_multiplier, 1.3);
  EXPECT_EQ(b8.rope_scaling.factor, 8);
  EXPECT_EQ(b8.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(flavor("1B").rope_scaling.factor, 32);  // Llama 3.2
  EXPECT_EQ(flavor("3B").n_heads, 24);
  EXPECT_EQ(flavor("405B").n_layers, 126);
}

TEST(Llama3Args, FfnHiddenSizesAsMetaComputesThem) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"debugmodel", 768}, {"1B", 8192}, {"3B", 8192}, {"8B", 14336}, {"70B", 28672}, {"405B", 53248}};
  for (const auto& [name, hidden] : expected)
    EXPECT_EQ(models::llama3::flavor(name).ffn_hidden_dim(), hidden) << name;
}

TEST(Llama3Args, ExplicitFfnDimOverridesTheRule) {
  ModelArgs a = models::llama3::flavor("debugmodel");
  a.ffn_dim = 700;  // not a multiple of multiple_of: taken as given
  EXPECT_EQ(a.ffn_hidden_dim(), 700);
  a.max_seq_len = 16;
  EXPECT_EQ((*Transformer(a).layers)[0].feed_forward->w1->out_features(), 700);
  EXPECT_EQ(models::llama3::summarize(a, 16).num_params, Transformer(a).num_parameters());
  a.ffn_dim = -1;
  EXPECT_TITAN_ERROR(a.validate(), "ffn_dim", "-1");
}

TEST(Llama3Args, ParameterCountsWithoutAllocating) {
  using models::llama3::flavor;
  using models::llama3::summarize;
  EXPECT_EQ(summarize(flavor("8B"), 8192).num_params, 8030261248);
  EXPECT_EQ(summarize(flavor("70B"), 8192).num_params, 70553706496);
  EXPECT_EQ(summarize(flavor("405B"), 8192).num_params, 405853388800);
  // Untied, as TorchTitan builds them (Meta ties 1B and 3B: 1.24B and 3.21B).
  EXPECT_EQ(summarize(flavor("1B"), 8192).num_params, 1498482688);
  EXPECT_EQ(summarize(flavor("3B"), 8192).num_params, 3606752256);

  models::ModelSummary s = summarize(flavor("8B"), 8192);
  EXPECT_EQ(s.num_embedding_params, 128256 * 4096);
  EXPECT_DOUBLE_EQ(s.flops_per_token, 6.0 * (8030261248 - 128256 * 4096) + 12.0 * 32 * 4096 * 8192);
  EXPECT_NE(s.description.find("8.03B"), std::string::npos) << s.description;

  // The count agrees with a built model's.
  for (ModelArgs a : {flavor("debugmodel"), tiny_args()}) {
    a.max_seq_len = 16;
    EXPECT_EQ(summarize(a, 16).num_params, Transformer(a).num_parameters());
  }
}

TEST(Llama3Args, ValidationNamesTheProblem) {
  ModelArgs a = tiny_args();
  a.n_kv_heads = 3;
  EXPECT_TITAN_ERROR(a.validate(), "n_heads (4)", "n_kv_heads (3)");
  a = tiny_args();
  a.n_heads = 3;
  EXPECT_TITAN_ERROR(a.validate(), "dim (16)", "n_heads (3)");
  EXPECT_TITAN_ERROR(models::llama3::flavor("7B"), "unknown flavor '7B'",
                     "debugmodel, 1B, 3B, 8B, 70B, 405B");
}

// ---- the module tree ----------------------------------------------------------------------------

TEST(Llama3Model, ParameterNamesAreTorchTitans) {
  Transformer m(tiny_args());
  std::vector<std::string> expected = {"tok_embeddings.weight"};
  for (std::string layer : {"layers.0.", "layers.1."}) {
    for (const char* leaf : {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                             "attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                             "feed_forward.w3.weight", "attention_norm.weight", "ffn_norm.weight"})
      expected.push_back(layer + leaf);
  }
  expected.insert(expected.end(), {"norm.weight", "output.weight"});
  std::vector<std::string> names;
  for (auto& [name, p] : m.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, expected);
  // The RoPE table is derived, so checkpoints leave it out.
  EXPECT_EQ(m.state_dict().size(), expected.size());
  EXPECT_EQ(m.named_buffers().size(), 2u);

  auto sd = m.state_dict();
  EXPECT_EQ(sd.at("layers.0.attention.wq.weight").sizes(), (Shape{16, 16}));
  EXPECT_EQ(sd.at("layers.0.attention.wk.weight").sizes(), (Shape{8, 16}));
  EXPECT_EQ(sd.at("layers.1.feed_forward.w2.weight").sizes(), (Shape{16, 48}));
  EXPECT_EQ(sd.at("output.weight").sizes(), (Shape{11, 16}));
}

TEST(Llama3Model, InitialisationIsTorchTitans) {
  ModelArgs a = tiny_args();
  a.dim = 64;
  a.vocab_size = 512;
  a.n_layers = 3;
  Transformer m(a);
  Generator gen(7);
  m.init_weights(gen);
  auto sd = m.state_dict();
  auto stddev = [](const Tensor& t) {
    double mean = ops::mean(t).item();
    return std::sqrt(ops::mean(ops::square(t - mean)).item());
  };
  auto max_abs = [](const Tensor& t) {
    std::vector<float> v = t.to_vector<float>();
    float m = 0;
    for (float x : v) m = std::max(m, std::abs(x));
    return m;
  };
  EXPECT_NEAR(stddev(sd.at("tok_embeddings.weight")), 1.0, 0.03);
  for (int64_t i = 0; i < a.n_layers; ++i) {
    std::string l = "layers." + std::to_string(i) + ".";
    double depth_std = 0.02 / std::sqrt(2.0 * (i + 1));
    for (const char* w :
         {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight", "feed_forward.w1.weight"})
      EXPECT_NEAR(stddev(sd.at(l + w)), 0.02, 0.002) << l + w;
    for (const char* w : {"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"})
      EXPECT_NEAR(stddev(sd.at(l + w)), depth_std, 0.1 * depth_std) << l + w;
    for (const char* w : {"attention_norm.weight", "ffn_norm.weight"})
      EXPECT_TRUE(tensors_close(sd.at(l + w), Tensor::ones({a.dim}), 0)) << l + w;
  }
  // Truncated at 3 std, which lowers the std to 0.986 of the untruncated one.
  const double out_std = 1 / std::sqrt(64.0);
  EXPECT_NEAR(stddev(sd.at("output.weight")), 0.986 * out_std, 0.03 * out_std);
  EXPECT_LE(max_abs(sd.at("output.weight")), 3 * out_std + 1e-6);
  EXPECT_TRUE(tensors_close(sd.at("norm.weight"), Tensor::ones({a.dim}), 0));

  // A seed fixes every weight.
  Transformer again(a);
  Generator gen2(7);
  again.init_weights(gen2);
  for (auto& [name, t] : again.state_dict()) EXPECT_TRUE(tensors_close(t, sd.at(name), 0, name));
}

TEST(Llama3Model, LogitsShapeAndCausality) {
  Transformer m(tiny_args());
  Generator gen(3);
  m.init_weights(gen);
  std::vector<int64_t> ids = {1, 5, 2, 9, 0, 3, 7, 4, 4, 10, 6, 8};
  Tensor logits = m(tokens_of(ids, 2));
  EXPECT_EQ(logits.sizes(), (Shape{2, 6, 11}));
  EXPECT_EQ(m.vocab_size(), 11);

  // Changing token t of the first sequence changes its logits at t and after, never before, and
  // leaves the other sequence alone.
  const int64_t t = 3;
  ids[t] = 8;
  Tensor changed = m(tokens_of(ids, 2));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 6; ++s) {
      bool same =
          tensors_close(changed.narrow(0, b, 1).narrow(1, s, 1), logits.narrow(0, b, 1).narrow(1, s, 1), 0);
      EXPECT_EQ(same, b == 1 || s < t) << "batch " << b << " position " << s;
    }
  }
  EXPECT_TITAN_ERROR(m(Tensor::zeros({1, 9}, {.dtype = kI64})), "max_seq_len (8)", "i64[1, 9]");
}

TEST(Llama3Model, BlocksRunTheirForwardHooks) {
  Transformer m(tiny_args());
  int calls = 0;
  (*m.layers)[1].register_forward_pre_hook([&](nn::Module&) { ++calls; });
  (*m.layers)[1].register_forward_hook([&](nn::Module&, Tensor& out) {
    EXPECT_EQ(out.sizes(), (Shape{1, 4, 16}));
    ++calls;
  });
  m(tokens_of({1, 2, 3, 4}, 1));
  EXPECT_EQ(calls, 2);
}

TEST(Llama3Model, CheckpointedBlocksGiveTheSameGradients) {
  // Activation checkpointing re-runs each block's body in backward, RoPE table and all.
  Transformer m(tiny_args());
  Generator gen(5);
  m.init_weights(gen);
  Tensor tokens = tokens_of({1, 5, 2, 9, 0, 3, 7, 4}, 2), targets = tokens_of({5, 2, 9, 0, 3, 7, 4, 1}, 2);
  ops::cross_entropy(m(tokens), targets).backward();
  std::map<std::string, Tensor> plain;
  for (auto& [name, p] : m.named_parameters()) plain[name] = p.grad().clone();

  m.zero_grad();
  for (const auto& layer : *m.layers)
    layer->set_forward_wrapper(
        [](const nn::Module::ForwardBody& body, const Tensor& x) { return autograd::checkpoint(body, x); });
  ops::cross_entropy(m(tokens), targets).backward();
  for (auto& [name, p] : m.named_parameters()) EXPECT_TRUE(tensors_close(p.grad(), plain.at(name), 0, name));
}

TEST(Llama3Model, GradcheckOfTheLossWithRespectToParameters) {
  Transformer m(tiny_args(), {.dtype = kF64});
  Generator gen(11);
  m.init_weights(gen);
  // Larger weights than the init's, so every path carries a gradient well above the finite
  // differences' noise.
  {
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : m.named_parameters())
      if (p.dim() == 2 && name != "tok_embeddings.weight")
        Tensor(p).copy_(Tensor::randn(p.sizes(), gen, {.dtype = kF64}, 0, 0.3));
  }
  auto named = m.named_parameters();
  std::map<std::string, Tensor> params(named.begin(), named.end());
  std::vector<Tensor> leaves;
  for (const char* name :
       {"layers.0.attention.wq.weight", "layers.0.attention.wk.weight", "layers.1.attention.wv.weight",
        "layers.1.feed_forward.w3.weight", "layers.0.attention_norm.weight", "norm.weight"})
    leaves.push_back(params.at(name));

  Tensor tokens = tokens_of({1, 5, 2, 9, 0, 3, 7, 4, 4, 10, 6, 8, 2, 2}, 2);
  Tensor targets = tokens_of({5, 2, 9, 0, 3, 7, 1, 4, 10, 6, 8, 2, 2, 0}, 2);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>&) { return std::vector<Tensor>{ops::cross_entropy(m(tokens), targets)}; },
      leaves);
  EXPECT_TRUE(res.ok) << res.message;
}

// ---- reference attention ------------------------------------------------------------------------

// The same attention composed of generic ops, with K and V repeated per query head and an
// additive -inf mask: what the fused path must agree with.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), Hkv = k.size(2), D = q.size(3);
  auto repeat = [&](const Tensor& t) {
    return t.unsqueeze(3).expand({B, S, Hkv, Hq / Hkv, D}).reshape({B, S, Hq, D}).permute({0, 2, 1, 3});
  };
  Tensor scores = ops::matmul(q.permute({0, 2, 1, 3}), repeat(k).transpose(-1, -2)) * scale;
  if (causal) {
    std::vector<double> mask(S * S, 0.0);
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = i + 1; j < S; ++j) mask[i * S + j] = -std::numeric_limits<double>::infinity();
    scores = scores + Tensor::from_vector(mask, {S, S}).to(q.dtype());
  }
  return ops::matmul(ops::softmax(scores, -1), repeat(v)).permute({0, 2, 1, 3});
}

struct AttnShape {
  int64_t S, Hq, Hkv;
};

class AttentionGradcheck : public ::testing::TestWithParam<AttnShape> {};

TEST_P(AttentionGradcheck, F64) {
  const auto [S, Hq, Hkv] = GetParam();
  Tensor q = rand_f64({2, S, Hq, 3}, 1), k = rand_f64({2, S, Hkv, 3}, 2), v = rand_f64({2, S, Hkv, 3}, 3);
  for (bool causal : {true, false}) {
    auto res = autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{
              attention_reference(in[0], in[1], in[2], {.causal = causal, .scale = 0.7})};
        },
        {q, k, v});
    EXPECT_TRUE(res.ok) << "S " << S << " Hq " << Hq << " Hkv " << Hkv << " causal " << causal << ": "
                        << res.message;
  }
}

INSTANTIATE_TEST_SUITE_P(GqaRatios, AttentionGradcheck,
                         ::testing::Values(AttnShape{1, 2, 2}, AttnShape{7, 2, 2}, AttnShape{1, 4, 2},
                                           AttnShape{7, 4, 2}, AttnShape{1, 4, 1}, AttnShape{7, 4, 1},
                                           AttnShape{7, 8, 2}));

TEST(AttentionReference, AgreesWithComposedOpsAcrossRowBlocks) {
  // 150 rows: two full blocks of 64 and a partial one, so both the causal column limit and the
  // block edges are exercised.
  for (DType dt : {kF64, kF32}) {
    Tensor q = rand_f64({2, 150, 4, 8}, 4).to(dt).detach().requires_grad_();
    Tensor k = rand_f64({2, 150, 2, 8}, 5).to(dt).detach().requires_grad_();
    Tensor v = rand_f64({2, 150, 2, 8}, 6).to(dt).detach().requires_grad_();
    Tensor cot = rand_f64({2, 150, 4, 8}, 7, false).to(dt);
    const double tol = dt == kF64 ? 1e-12 : 1e-5;
    for (bool causal : {true, false}) {
      std::vector<Tensor> fused, composed;
      for (bool use_fused : {true, false}) {
        for (Tensor t : {q, k, v}) t.set_grad(Tensor());
        Tensor out = use_fused ? attention_reference(q, k, v, {.causal = causal})
                               : composed_attention(q, k, v, causal, 1 / std::sqrt(8.0));
        ops::sum(out * cot).backward();
        (use_fused ? fused : composed) = {out.detach(), q.grad(), k.grad(), v.grad()};
      }
      const char* what[] = {"out", "dq", "dk", "dv"};
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(tensors_close(
            fused[i], composed[i], tol,
            std::string(what[i]) + (causal ? " causal " : " full ") + std::string(dtype_name(dt))));
    }
    // Without grad the probabilities live in block scratch only; the output is the same.
    autograd::NoGradGuard no_grad;
    EXPECT_TRUE(tensors_close(attention_reference(q, k, v),
                              composed_attention(q, k, v, true, 1 / std::sqrt(8.0)), tol));
  }
}

TEST(AttentionReference, ErrorsNameTheShapes) {
  Tensor q = Tensor::zeros({1, 4, 6, 8}), k = Tensor::zeros({1, 4, 4, 8});
  EXPECT_TITAN_ERROR(attention_reference(q, k, k), "query heads (6)", "key/value heads (4)");
  EXPECT_TITAN_ERROR(attention_reference(q, Tensor::zeros({1, 5, 2, 8}), Tensor::zeros({1, 5, 2, 8})),
                     "same B, S", "f32[1, 5, 2, 8]");
  EXPECT_TITAN_ERROR(attention_reference(q, k.narrow(2, 0, 2), k.narrow(2, 0, 2).to(kF64)), "share a dtype");
}

// ---- registry -----------------------------------------------------------------------------------

TEST(Llama3Registry, BuildsFlavorsWithOverrides) {
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  EXPECT_EQ(spec.flavors, models::llama3::flavor_names());
  Generator gen(1);
  models::ModelConfig cfg{.name = "llama3", .flavor = "debugmodel", .vocab_size = 300};
  auto model = spec.build(cfg, 32, gen);
  EXPECT_EQ(model->vocab_size(), 300);
  Tensor logits = (*model)(Tensor::zeros({2, 32}, {.dtype = kI64}));
  EXPECT_EQ(logits.sizes(), (Shape{2, 32, 300}));
  models::ModelSummary s = spec.summarize(cfg, 32);
  EXPECT_EQ(s.num_params, model->num_parameters());
  EXPECT_NE(s.description.find("llama3 debugmodel"), std::string::npos) << s.description;
}

TEST(Llama3Registry, ErrorsSayWhatToDo) {
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  Generator gen(1);
  EXPECT_TITAN_ERROR(spec.build({.flavor = "debugmodel", .attention = "flash"}, 32, gen),
                     "unknown model.attention 'flash'", "\"splash\"", "\"reference\"");
  EXPECT_TITAN_ERROR(spec.summarize({.flavor = "8b"}, 32), "unknown flavor '8b'", "8B");
  EXPECT_TITAN_ERROR(spec.build({.flavor = "debugmodel", .weight_tying = true}, 32, gen), "weight_tying");
  EXPECT_TITAN_ERROR(models::get_train_spec("llama2"), "unknown model.name 'llama2'", "llama3");
}

}  // namespace
}  // namespace titan
