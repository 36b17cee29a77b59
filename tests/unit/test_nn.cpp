#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <numeric>

#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/parallel.h"
#include "titan/nn/embedding.h"
#include "titan/nn/init.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"
#include "titan/nn/norm.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/norm.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using nn::Embedding;
using nn::Linear;
using nn::RMSNorm;
using std::make_shared;

// A miniature of the Llama module tree, so the names are the ones checkpoints will carry.
struct Attention : nn::Module {
  std::shared_ptr<Linear> wq, wk;
  explicit Attention(int64_t d) {
    wq = register_module("wq", make_shared<Linear>(d, d));
    wk = register_module("wk", make_shared<Linear>(d, d));
  }
};

struct Block : nn::Module {
  std::shared_ptr<Attention> attention;
  std::shared_ptr<RMSNorm> attention_norm;
  explicit Block(int64_t d) {
    attention = register_module("attention", make_shared<Attention>(d));
    attention_norm = register_module("attention_norm", make_shared<RMSNorm>(d));
  }
  Tensor operator()(const Tensor& x) {
    return run_forward([&] {
      Tensor n = (*attention_norm)(x);
      return x + (*attention->wq)(n) * (*attention->wk)(n);
    });
  }
};

struct TinyModel : nn::Module {
  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<nn::ModuleList<Block>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> output;
  TinyModel(int64_t vocab, int64_t d, int n_layers) {
    tok_embeddings = register_module("tok_embeddings", make_shared<Embedding>(vocab, d));
    layers = register_module("layers", make_shared<nn::ModuleList<Block>>());
    for (int i = 0; i < n_layers; ++i) layers->push_back(make_shared<Block>(d));
    norm = register_module("norm", make_shared<RMSNorm>(d));
    output = register_module("output", make_shared<Linear>(d, vocab));
  }
  Tensor operator()(const Tensor& ids) {
    Tensor h = (*tok_embeddings)(ids);
    for (auto& layer : *layers) h = (*layer)(h);
    return (*output)((*norm)(h));
  }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (auto& [name, t] : named) out.push_back(name);
  return out;
}

Tensor ids_for(std::vector<int64_t> ids) {
  int64_t n = static_cast<int64_t>(ids.size());
  return Tensor::from_vector<int64_t>(ids, {1, n});
}

TEST(Module, DottedNamesInRegistrationOrder) {
  TinyModel m(16, 8, 2);
  std::vector<std::string> expected = {"tok_embeddings.weight"};
  for (const char* layer : {"layers.0.", "layers.1."})
    for (const char* leaf : {"attention.wq.weight", "attention.wk.weight", "attention_norm.weight"})
      expected.push_back(std::string(layer) + leaf);
  expected.insert(expected.end(), {"norm.weight", "output.weight"});
  EXPECT_EQ(names_of(m.named_parameters()), expected);
  EXPECT_EQ(m.num_parameters(), 16 * 8 + 2 * (2 * 8 * 8 + 8) + 8 + 16 * 8);
  for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.requires_grad());

  std::vector<std::string> modules;
  for (auto& [name, mod] : m.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules.size(), 1u + 1 + 1 + 2 * 5 + 1 + 1);
  EXPECT_EQ(modules[0], "");
  EXPECT_EQ(modules[3], "layers.0");
  EXPECT_EQ(modules[4], "layers.0.attention");
  EXPECT_EQ(&(*m.layers)[1], m.named_modules()[8].second);
  EXPECT_TITAN_ERROR((*m.layers)[2], "ModuleList", "index 2", "2 modules");
}

TEST(Module, TiedWeightsAreOneParameterButEveryName) {
  // An output projection tied to the token embedding.
  nn::Module m;
  auto emb = m.register_module("emb", make_shared<Embedding>(5, 3));
  m.register_module("head", make_shared<nn::Module>())->register_parameter("weight", emb->weight);
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"emb.weight"}));
  nn::StateDict sd = m.state_dict();
  EXPECT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd.at("head.weight").data_ptr(), sd.at("emb.weight").data_ptr());
}

TEST(Module, RegistrationErrorsNameTheKey) {
  nn::Module m;
  m.register_parameter("w", Tensor::zeros({2}));
  EXPECT_TITAN_ERROR(m.register_parameter("w", Tensor::zeros({2})), "'w'", "already taken");
  EXPECT_TITAN_ERROR(m.register_buffer("a.b", Tensor::zeros({2})), "'a.b'", "'.'");
  EXPECT_TITAN_ERROR(m.register_module("w", make_shared<nn::Module>()), "'w'", "already taken");
  EXPECT_TITAN_ERROR(m.register_buffer("g", Tensor::zeros({2}).requires_grad_()), "'g'",
                     "register_parameter");
  EXPECT_TITAN_ERROR(m.register_parameter("y", Tensor::ones({2}).requires_grad_() * 2.0), "'y'", "detach");
  EXPECT_TITAN_ERROR(m.register_parameter("i", Tensor::zeros({2}, {.dtype = kI64})), "'i'", "i64[2]",
                     "buffer");
}

TEST(Module, BuffersAndNonPersistentBuffers) {
  nn::Module m;
  m.register_buffer("kept", Tensor::ones({3}));
  m.register_buffer("recomputed", Tensor::ones({4}), /*persistent=*/false);
  EXPECT_EQ(names_of(m.named_buffers()), (std::vector<std::string>{"kept", "recomputed"}));
  nn::StateDict sd = m.state_dict();
  EXPECT_EQ(sd.size(), 1u);
  EXPECT_TRUE(sd.count("kept"));
  EXPECT_TRUE(m.named_parameters().empty());
}

TEST(Module, StateDictRoundTripCopiesInPlace) {
  TinyModel a(16, 8, 2), b(16, 8, 2);
  Generator ga(1), gb(2);
  a.init_weights(ga);
  b.init_weights(gb);
  Tensor ids = ids_for({3, 1, 4, 1, 5});
  std::vector<float> ya = a(ids).to_vector<float>();
  EXPECT_NE(ya, b(ids).to_vector<float>());

  std::vector<void*> b_storage;
  for (const Tensor& p : b.parameters()) b_storage.push_back(p.data_ptr());
  nn::LoadResult r = b.load_state_dict(a.state_dict());
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  for (auto& [name, t] : a.state_dict())
    EXPECT_EQ(t.to_vector<float>(), b.state_dict().at(name).to_vector<float>()) << name;
  std::vector<Tensor> params = b.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].data_ptr(), b_storage[i]) << "load_state_dict must copy into the existing tensors";
    EXPECT_TRUE(params[i].requires_grad());
  }
  EXPECT_EQ(b(ids).to_vector<float>(), ya);
}

TEST(Module, LoadStateDictErrorsNameKeyExpectedAndFound) {
  TinyModel m(16, 8, 2);
  nn::StateDict good = TinyModel(16, 8, 2).state_dict();

  nn::StateDict missing = good;
  missing.erase("layers.1.attention.wk.weight");
  EXPECT_TITAN_ERROR(m.load_state_dict(missing), "missing key 'layers.1.attention.wk.weight'", "f32[8, 8]");

  nn::StateDict unexpected = good;
  unexpected.emplace("layers.2.attention.wq.weight", Tensor::zeros({8, 8}));
  EXPECT_TITAN_ERROR(m.load_state_dict(unexpected), "unexpected key 'layers.2.attention.wq.weight'",
                     "f32[8, 8]");

  nn::StateDict shape = good;
  shape["output.weight"] = Tensor::zeros({8, 16});
  EXPECT_TITAN_ERROR(m.load_state_dict(shape), "key 'output.weight'", "expected f32[16, 8]",
                     "found f32[8, 16]");

  nn::StateDict dtype = good;
  dtype["norm.weight"] = Tensor::zeros({8}, {.dtype = kF64});
  EXPECT_TITAN_ERROR(m.load_state_dict(dtype), "key 'norm.weight'", "expected f32[8]", "found f64[8]");

  // A failed load copies nothing, not even the keys that were fine.
  nn::StateDict partly_bad = good;
  partly_bad["tok_embeddings.weight"] = Tensor::full({16, 8}, 7.0);
  partly_bad.erase("norm.weight");
  EXPECT_TITAN_ERROR(m.load_state_dict(partly_bad), "missing key 'norm.weight'");
  EXPECT_EQ(m.tok_embeddings->weight.to_vector<float>(), std::vector<float>(16 * 8, 0.0f));
}

TEST(Module, NonStrictLoadReportsAndLoadsTheRest) {
  TinyModel m(16, 8, 1);
  nn::StateDict sd = TinyModel(16, 8, 1).state_dict();
  sd["norm.weight"] = Tensor::full({8}, 3.0);
  sd.erase("output.weight");
  sd.emplace("rope.freqs", Tensor::zeros({4}));
  nn::LoadResult r = m.load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"output.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"rope.freqs"}));
  EXPECT_EQ(m.norm->weight.to_vector<float>(), std::vector<float>(8, 3.0f));
  // Shape mismatches stay errors: strict=false is about which keys exist, not what they hold.
  sd["norm.weight"] = Tensor::zeros({9});
  EXPECT_TITAN_ERROR(m.load_state_dict(sd, false), "key 'norm.weight'", "expected f32[8]", "found f32[9]");
}

TEST(Module, TrainEvalIsRecursive) {
  TinyModel m(16, 8, 2);
  EXPECT_TRUE(m.is_training());
  m.eval();
  for (auto& [name, mod] : m.named_modules()) EXPECT_FALSE(mod->is_training()) << name;
  m.train();
  for (auto& [name, mod] : m.named_modules()) EXPECT_TRUE(mod->is_training()) << name;
}

TEST(Module, ZeroGradDropsEveryGradient) {
  TinyModel m(16, 8, 2);
  Generator g(3);
  m.init_weights(g);
  ops::sum(m(ids_for({1, 2, 3}))).backward();
  for (auto& [name, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  m.zero_grad();
  for (auto& [name, p] : m.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
}

TEST(Module, ForwardHooksRunAroundForwardAndCanBeRemoved) {
  Linear lin(3, 2);
  Generator g(4);
  lin.init_weights(g);
  std::vector<std::string> log;
  uint64_t pre = lin.register_forward_pre_hook([&](nn::Module&) { log.push_back("pre"); });
  uint64_t post = lin.register_forward_hook([&](nn::Module& m, Tensor& out) {
    EXPECT_EQ(&m, &lin);
    log.push_back("post");
    out = out * 2.0;
  });
  Tensor x = Tensor::ones({1, 3});
  Tensor plain = lin.forward(x);
  EXPECT_TRUE(log.empty()) << "forward() itself runs no hooks";
  Tensor hooked = lin(x);
  EXPECT_EQ(log, (std::vector<std::string>{"pre", "post"}));
  EXPECT_TRUE(test::tensors_close(hooked, plain * 2.0, 0));
  lin.remove_hook(pre);
  lin.remove_hook(post);
  EXPECT_TRUE(test::tensors_close(lin(x), plain, 0));
  EXPECT_EQ(log.size(), 2u);
  EXPECT_TITAN_ERROR(lin.remove_hook(post), "no hook with id");
}

TEST(Module, InitWeightsRunsChildrenBeforeParent) {
  // The parent's scheme wins over its children's defaults, and a seed fixes the values.
  struct Parent : nn::Module {
    std::shared_ptr<Linear> a = register_module("a", make_shared<Linear>(4, 4));
    std::shared_ptr<Linear> b = register_module("b", make_shared<Linear>(4, 4));
    void reset_parameters(Generator&) override { nn::init::constant_(b->weight, 0.5); }
  };
  Parent p1, p2;
  Generator g1(5), g2(5);
  p1.init_weights(g1);
  p2.init_weights(g2);
  EXPECT_EQ(p1.b->weight.to_vector<float>(), std::vector<float>(16, 0.5f));
  EXPECT_EQ(p1.a->weight.to_vector<float>(), p2.a->weight.to_vector<float>());
  EXPECT_EQ(g1.offset(), 32u) << "each Linear draws its numel from the stream";
}

// ---- init -------------------------------------------------------------------------------------

struct Moments {
  double mean = 0, std = 0, min = INFINITY, max = -INFINITY;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size()));
  return m;
}

constexpr int64_t kSamples = 200000;  // standard error of a mean ~ std / 450

TEST(Init, NormalAndUniformStatistics) {
  Generator g(7);
  Tensor t = Tensor::empty({kSamples});
  nn::init::normal_(t, 1.0, 2.0, g);
  Moments m = moments(t);
  EXPECT_NEAR(m.mean, 1.0, 0.02);
  EXPECT_NEAR(m.std, 2.0, 0.02);
  nn::init::uniform_(t, -3.0, 1.0, g);
  m = moments(t);
  EXPECT_GE(m.min, -3.0);
  EXPECT_LT(m.max, 1.0);
  EXPECT_NEAR(m.mean, -1.0, 0.01);
  EXPECT_NEAR(m.std, 4.0 / std::sqrt(12.0), 0.01);
}

TEST(Init, TruncatedNormalStatistics) {
  // Normal(0.5, 1) cut to [-0.5, 2]: the moments of the truncated law, from its density.
  double mu = 0.5, sd = 1.0, a = -0.5, b = 2.0;
  auto phi = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi); };
  auto cdf = [](double x) { return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)); };
  double al = (a - mu) / sd, be = (b - mu) / sd, z = cdf(be) - cdf(al);
  double mean = mu + sd * (phi(al) - phi(be)) / z;
  double var = sd * sd * (1 + (al * phi(al) - be * phi(be)) / z - std::pow((phi(al) - phi(be)) / z, 2));
  Generator g(8);
  Tensor t = Tensor::empty({kSamples});
  nn::init::trunc_normal_(t, mu, sd, a, b, g);
  Moments m = moments(t);
  EXPECT_GE(m.min, a);
  EXPECT_LE(m.max, b);
  EXPECT_NEAR(m.mean, mean, 0.01);
  EXPECT_NEAR(m.std, std::sqrt(var), 0.01);
  // TorchTitan's weight init: std 0.02 cut at 3 std.
  nn::init::trunc_normal_(t, 0.0, 0.02, -0.06, 0.06, g);
  m = moments(t);
  EXPECT_GE(m.min, -0.06);
  EXPECT_LE(m.max, 0.06);
  EXPECT_NEAR(m.std, 0.02 * 0.9866, 0.0005);  // a cut at 3 std trims 1.3% off the std
}

TEST(Init, SeededAndAdvancingAndThreadCountFree) {
  Generator g(9);
  Tensor a = Tensor::empty({5000}), b = Tensor::empty({5000});
  nn::init::normal_(a, 0.0, 1.0, g);
  EXPECT_EQ(g.offset(), 5000u);
  nn::init::normal_(b, 0.0, 1.0, g);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>()) << "each call must draw fresh numbers";
  // The same stream as Tensor::randn.
  Generator g2(9);
  EXPECT_EQ(a.to_vector<float>(), Tensor::randn({5000}, g2).to_vector<float>());

  int threads = num_threads();
  Tensor one = Tensor::empty({100000}), many = Tensor::empty({100000});
  set_num_threads(1);
  Generator g3(10);
  nn::init::trunc_normal_(one, 0.0, 0.02, -0.04, 0.04, g3);
  set_num_threads(std::max(threads, 4));
  Generator g4(10);
  nn::init::trunc_normal_(many, 0.0, 0.02, -0.04, 0.04, g4);
  set_num_threads(threads);
  EXPECT_EQ(one.to_vector<float>(), many.to_vector<float>());
}

TEST(Init, DtypesAndStridedViews) {
  // f64 draws the same stream at f64 precision; a transposed view is filled in its own row-major
  // order; bf16 gets the f32 values rounded.
  Generator g(11), g64(11), gt(11), gb(11);
  Tensor f32 = Tensor::empty({6, 4});
  nn::init::normal_(f32, 0.0, 1.0, g);
  Tensor f64 = Tensor::empty({6, 4}, {.dtype = kF64});
  nn::init::normal_(f64, 0.0, 1.0, g64);
  EXPECT_TRUE(test::tensors_close(f64, f32, 1e-7));
  Tensor base = Tensor::empty({4, 6});
  nn::init::normal_(base.transpose(0, 1), 0.0, 1.0, gt);
  EXPECT_EQ(base.transpose(0, 1).to_vector<float>(), f32.to_vector<float>());
  Tensor bf = Tensor::empty({6, 4}, {.dtype = kBF16});
  nn::init::normal_(bf, 0.0, 1.0, gb);
  EXPECT_TRUE(test::tensors_close(bf.to(kF32), f32, 1e-2));
  nn::init::ones_(f64);
  EXPECT_EQ(f64.to_vector<double>(), std::vector<double>(24, 1.0));
  EXPECT_TITAN_ERROR(nn::init::normal_(Tensor::empty({2}, {.dtype = kI32}), 0, 1, g), "normal_", "i32[2]");
  EXPECT_TITAN_ERROR(nn::init::trunc_normal_(f32, 0, 1, 1, -1, g), "trunc_normal_", "a < b");
}

// ---- layers -----------------------------------------------------------------------------------

TEST(Layers, LinearLayoutDefaultsAndInit) {
  Linear lin(5, 3);
  EXPECT_EQ(names_of(lin.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(lin.weight.sizes(), (Shape{3, 5}));
  Generator g(12);
  lin.init_weights(g);
  Moments m = moments(lin.weight);
  EXPECT_LE(m.max, 1 / std::sqrt(5.0));
  EXPECT_GE(m.min, -1 / std::sqrt(5.0));
  Tensor x = test::rand_f32({2, 4, 5}, 13);
  EXPECT_TRUE(test::tensors_close(lin(x), ops::linear(x, lin.weight), 0));

  Linear biased(5, 3, /*bias=*/true);
  EXPECT_EQ(names_of(biased.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TITAN_ERROR(Linear(0, 3), "Linear", "in=0");
}

TEST(Layers, EmbeddingLooksUpRows) {
  Embedding emb(10, 4);
  Generator g(14);
  emb.init_weights(g);
  Tensor out = emb(ids_for({7, 0, 7}));
  EXPECT_EQ(out.sizes(), (Shape{1, 3, 4}));
  std::vector<float> w = emb.weight.to_vector<float>(), o = out.to_vector<float>();
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(o[j], w[7 * 4 + j]);
    EXPECT_EQ(o[4 + j], w[j]);
  }
  EXPECT_NEAR(moments(emb.weight).std, 1.0, 0.3);
}

TEST(Layers, NormsDefaults) {
  RMSNorm rms(6);
  EXPECT_EQ(rms.eps(), 1e-5);
  EXPECT_EQ(rms.weight.to_vector<float>(), std::vector<float>(6, 1.0f));
  Tensor x = test::rand_f32({3, 6}, 15);
  EXPECT_TRUE(test::tensors_close(rms(x), ops::rms_norm(x, rms.weight, 1e-5), 0));

  nn::LayerNorm ln(6);
  EXPECT_EQ(names_of(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(names_of(nn::LayerNorm(6, 1e-5, false).named_parameters()).empty());
  EXPECT_EQ(names_of(nn::LayerNorm(6, 1e-5, true, false).named_parameters()),
            (std::vector<std::string>{"weight"}));
  Generator g(16);
  nn::init::normal_(ln.bias, 0, 1, g);
  ln.init_weights(g);
  EXPECT_EQ(ln.bias.to_vector<float>(), std::vector<float>(6, 0.0f)) << "init_weights restores bias = 0";
}

// The modules' forward with their own parameters, differentiated against f64 central differences.
TEST(Layers, GradcheckModuleForward) {
  TensorOptions f64{.dtype = kF64};
  Generator g(17);
  Tensor x = test::rand_f64({2, 3, 5}, 18);
  auto check = [](auto fn, const std::vector<Tensor>& inputs) {
    auto res = autograd::gradcheck(fn, inputs);
    EXPECT_TRUE(res.ok) << res.message;
  };
  Linear lin(5, 4, true, f64);
  lin.init_weights(g);
  check([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{lin(in[0])}; },
        {x, lin.weight, lin.bias});

  RMSNorm rms(5, 1e-5, f64);
  nn::init::normal_(rms.weight, 1.0, 0.5, g);
  check([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{rms(in[0])}; }, {x, rms.weight});

  nn::LayerNorm ln(5, 1e-5, true, true, f64);
  nn::init::normal_(ln.weight, 1.0, 0.5, g);
  nn::init::normal_(ln.bias, 0.0, 0.5, g);
  check([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ln(in[0])}; },
        {x, ln.weight, ln.bias});
}

}  // namespace
}  // namespace titan
