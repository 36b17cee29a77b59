#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "support/test_util.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan {
namespace {

using autograd::checkpoint;
using parallel::ActivationCheckpointMode;
using std::make_shared;

// x + w2(silu(w1(norm(x)))): a feed-forward block with its residual. Its input reaches its
// gradient along two paths, so the order in which contributions are summed matters.
struct Block : nn::Module {
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> w1, w2;
  Block(int64_t dim, int64_t hidden) {
    norm = register_module("norm", make_shared<nn::RMSNorm>(dim));
    w1 = register_module("w1", make_shared<nn::Linear>(dim, hidden));
    w2 = register_module("w2", make_shared<nn::Linear>(hidden, dim));
  }
  Tensor forward(const Tensor& x) { return x + (*w2)(ops::silu((*w1)((*norm)(x)))); }
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& h) { return forward(h); });
  }
};

struct Stack : nn::Module {
  std::shared_ptr<nn::ModuleList<Block>> layers;
  std::shared_ptr<nn::Linear> output;
  Stack(int n_layers, int64_t dim, int64_t hidden, int64_t vocab) {
    layers = register_module("layers", make_shared<nn::ModuleList<Block>>());
    for (int i = 0; i < n_layers; ++i) layers->push_back(make_shared<Block>(dim, hidden));
    output = register_module("output", make_shared<nn::Linear>(dim, vocab));
    Generator gen(7);
    init_weights(gen);
    // Norm weights of 1 would make their gradients trivially alike; perturb them.
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters())
      if (name.find("norm") != std::string::npos) p.copy_(test::rand_f32(p.sizes(), 11, 0.5, 1.5));
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = x;
    for (auto& layer : *layers) h = (*layer)(h);
    return (*output)(h);
  }
  // Starts from plain execution, then applies `mode`.
  int64_t checkpointing(ActivationCheckpointMode mode, int64_t every_k = 1) {
    for (auto& [name, layer] : layers->named_children()) layer->set_forward_wrapper(nullptr);
    return parallel::apply_activation_checkpointing(*layers, mode, every_k);
  }
};

struct Problem {
  Tensor x, targets;
};

Problem make_problem(int64_t tokens, int64_t dim, int64_t vocab) {
  Generator gen(3);
  std::vector<int64_t> t(tokens);
  for (int64_t i = 0; i < tokens; ++i) t[i] = (i * 7 + 3) % vocab;
  return {Tensor::randn({tokens, dim}, gen), Tensor::from_vector<int64_t>(t, {tokens})};
}

// Every gradient a step produced: each parameter's by name, and the input's under "input".
using Grads = std::map<std::string, std::vector<float>>;

Grads step(Stack& model, const Problem& p, bool input_requires_grad = true) {
  model.zero_grad();
  Tensor x = p.x.detach();
  if (input_requires_grad) x.requires_grad_();
  ops::cross_entropy(model(x), p.targets).backward();
  Grads out;
  for (auto& [name, t] : model.named_parameters()) {
    EXPECT_TRUE(t.grad().defined()) << name;
    if (t.grad().defined()) out[name] = t.grad().to_vector<float>();
  }
  if (input_requires_grad) out["input"] = x.grad().to_vector<float>();
  return out;
}

// Bit-for-bit equality of every gradient, reporting the first differing element.
void expect_identical(const Grads& got, const Grads& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no gradient for " << name;
    const std::vector<float>& g = it->second;
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": gradient of " << name << " differs at element " << i << ": " << g[i]
                      << " vs " << w[i];
        break;
      }
    }
  }
}

TEST(Checkpoint, GradientsIdenticalToNoCheckpointing) {
  Stack model(5, 32, 64, 24);
  Problem p = make_problem(16, 32, 24);
  EXPECT_EQ(model.checkpointing(ActivationCheckpointMode::none), 0);
  Grads plain = step(model, p);
  EXPECT_EQ(plain.size(), 5u * 3 + 2);

  EXPECT_EQ(model.checkpointing(ActivationCheckpointMode::full), 5);
  expect_identical(step(model, p), plain, "full");
  EXPECT_EQ(model.checkpointing(ActivationCheckpointMode::selective, 2), 2);
  expect_identical(step(model, p), plain, "selective 2");
  EXPECT_EQ(model.checkpointing(ActivationCheckpointMode::selective, 3), 1);
  expect_identical(step(model, p), plain, "selective 3");
}

// The hard case for summation order: a shared gain `s` is read twice in every block and again by
// the head, a value `u` computed from it before the stack is read only inside the blocks, and the
// input skips over the whole stack. Their gradients add up contributions from many blocks and
// from outside them; they match bit for bit only if each checkpointed block hands every
// contribution over individually, at the place the plain backward would have added it.
TEST(Checkpoint, SharedTensorsAndSkipConnectionsKeepTheirSummationOrder) {
  const int n = 4;
  std::vector<std::shared_ptr<Block>> blocks;
  Generator gen(5);
  for (int i = 0; i < n; ++i) {
    blocks.push_back(make_shared<Block>(16, 32));
    blocks.back()->init_weights(gen);
  }
  Tensor s = test::rand_f32({16}, 21, 0.5, 1.5).requires_grad_();
  Problem p = make_problem(8, 16, 16);

  enum class How { plain, every, alternate, nested };
  auto run = [&](How how) {
    Grads out;
    for (auto& b : blocks) b->zero_grad();
    s.set_grad(Tensor());
    Tensor x = p.x.detach().requires_grad_();
    Tensor u = s * 0.5;
    auto body = [&blocks, s, u](size_t i) {
      return [&blocks, s, u, i](const Tensor& h) { return (*blocks[i])(h * s + u) * s; };
    };
    Tensor h = x;
    for (size_t i = 0; i < blocks.size(); ++i) {
      bool wrap = how == How::every || (how == How::alternate && i % 2 == 1);
      if (how == How::nested && i % 2 == 0) {
        // Two blocks per outer checkpoint, the second also checkpointed on its own.
        h = checkpoint([body, i](const Tensor& a) { return checkpoint(body(i + 1), body(i)(a)); }, h);
        ++i;
      } else {
        h = wrap ? checkpoint(body(i), h) : body(i)(h);
      }
    }
    ops::cross_entropy((h + x) * s, p.targets).backward();
    for (size_t i = 0; i < blocks.size(); ++i)
      for (auto& [name, t] : blocks[i]->named_parameters())
        out[std::to_string(i) + "." + name] = t.grad().to_vector<float>();
    out["s"] = s.grad().to_vector<float>();
    out["input"] = x.grad().to_vector<float>();
    return out;
  };
  Grads plain = run(How::plain);
  expect_identical(run(How::every), plain, "every block");
  expect_identical(run(How::alternate), plain, "every other block");
  expect_identical(run(How::nested), plain, "nested");
}

TEST(Checkpoint, FullCheckpointingLowersPeakMemory) {
  const int64_t tokens = 512, dim = 128, hidden = 512, vocab = 64;
  Stack model(12, dim, hidden, vocab);
  Problem p = make_problem(tokens, dim, vocab);
  auto peak_of_step = [&](ActivationCheckpointMode mode) {
    model.checkpointing(mode);
    model.zero_grad();
    CpuAllocator::instance().reset_peak();
    int64_t before = CpuAllocator::instance().stats().allocated_bytes;
    step(model, p);
    return CpuAllocator::instance().stats().peak_allocated_bytes - before;
  };
  double mib = 1 << 20;
  double plain = static_cast<double>(peak_of_step(ActivationCheckpointMode::none)) / mib;
  double full = static_cast<double>(peak_of_step(ActivationCheckpointMode::full)) / mib;
  std::printf(
      "[ activation checkpointing ] 12 blocks, %lld tokens x %lld (hidden %lld), f32: peak memory "
      "of a step above its start: none %.1f MiB, full %.1f MiB (%.0f%% saved)\n",
      static_cast<long long>(tokens), static_cast<long long>(dim), static_cast<long long>(hidden), plain,
      full, 100.0 * (1.0 - full / plain));
  // Plain keeps about 2.3 MiB of activations per block; full keeps each block's 0.25 MiB input
  // and rebuilds one block at a time.
  EXPECT_LT(full, 0.5 * plain);
}

TEST(Checkpoint, InputWithoutGradStillGivesParameterGradients) {
  Stack model(3, 16, 32, 12);
  Problem p = make_problem(8, 16, 12);
  model.checkpointing(ActivationCheckpointMode::none);
  Grads plain = step(model, p, /*input_requires_grad=*/false);
  model.checkpointing(ActivationCheckpointMode::full);
  expect_identical(step(model, p, false), plain, "full, input without grad");
}

TEST(Checkpoint, ParameterHooksFireOncePerBackward) {
  Stack model(4, 16, 32, 12);
  Problem p = make_problem(8, 16, 12);
  std::map<std::string, int> calls;
  for (auto& [name, t] : model.named_parameters())
    t.register_post_accumulate_grad_hook([&calls, name = name](Tensor& leaf) {
      EXPECT_TRUE(leaf.grad().defined());
      ++calls[name];
    });
  model.checkpointing(ActivationCheckpointMode::full);
  step(model, p);
  step(model, p);
  ASSERT_EQ(calls.size(), 4u * 3 + 1);
  for (auto& [name, n] : calls) EXPECT_EQ(n, 2) << name;
}

TEST(Checkpoint, AutogradGradReturnsParameterGradientsInsteadOfAccumulating) {
  Stack model(3, 16, 32, 12);
  Problem p = make_problem(8, 16, 12);
  auto grads = [&](ActivationCheckpointMode mode) {
    model.checkpointing(mode);
    model.zero_grad();
    Tensor x = p.x.detach().requires_grad_();
    std::vector<Tensor> wrt = model.parameters();
    wrt.push_back(x);
    Tensor loss = ops::cross_entropy(model(x), p.targets);
    std::vector<Tensor> g = autograd::grad({loss}, {Tensor::ones({}, {})}, wrt);
    for (auto& t : model.parameters()) EXPECT_FALSE(t.grad().defined());
    Grads out;
    for (size_t i = 0; i < g.size(); ++i) out[std::to_string(i)] = g[i].to_vector<float>();
    return out;
  };
  expect_identical(grads(ActivationCheckpointMode::full), grads(ActivationCheckpointMode::none), "grad()");
}

TEST(Checkpoint, RetainedGraphRecomputesOnEveryBackward) {
  Tensor w = test::rand_f32({6}, 31).requires_grad_();
  Tensor x = test::rand_f32({6}, 32).requires_grad_();
  auto body = [w](const Tensor& h) { return ops::exp(h * w); };
  auto run = [&](bool checkpointed) {
    w.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor loss = ops::sum(checkpointed ? checkpoint(body, x) : body(x));
    autograd::backward({loss}, {Tensor::ones({}, {})}, /*retain_graph=*/true);
    autograd::backward({loss}, {Tensor::ones({}, {})});
    return Grads{{"w", w.grad().to_vector<float>()}, {"x", x.grad().to_vector<float>()}};
  };
  expect_identical(run(true), run(false), "two backwards");
}

// A body drawing random numbers sees the same ones when re-run if its generator is passed in.
TEST(Checkpoint, GeneratorsAreRewoundForTheRecompute) {
  Tensor w = test::rand_f32({32}, 41).requires_grad_();
  Tensor x = test::rand_f32({32}, 42).requires_grad_();
  Generator gen(9);
  auto body = [w, &gen](const Tensor& h) { return ops::square(h * w + Tensor::randn({32}, gen)); };
  auto run = [&](bool checkpointed) {
    gen.set_offset(100);
    w.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor y = checkpointed ? checkpoint(body, x, {&gen}) : body(x);
    uint64_t after_forward = gen.offset();
    ops::sum(y).backward();
    EXPECT_EQ(gen.offset(), after_forward) << "the recompute must leave the generator where it was";
    return Grads{{"w", w.grad().to_vector<float>()}, {"x", x.grad().to_vector<float>()}};
  };
  expect_identical(run(true), run(false), "random body");
}

TEST(Checkpoint, WithoutGradModeIsJustTheBody) {
  Tensor x = test::rand_f32({4}, 51).requires_grad_();
  autograd::NoGradGuard no_grad;
  Tensor y = checkpoint([](const Tensor& h) { return h * 2.0; }, x);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, BodyThatChangesShapeOnRecomputeIsAnError) {
  Tensor x = test::rand_f32({4}, 52).requires_grad_();
  int calls = 0;
  Tensor y = checkpoint([&calls](const Tensor& h) { return ++calls == 1 ? h * 2.0 : ops::sum(h); }, x);
  EXPECT_TITAN_ERROR(ops::sum(y).backward(), "checkpoint", "re-run", "same function");
}

TEST(Checkpoint, RebuiltBackwardOutsideABackwardIsAnError) {
  Tensor x = test::rand_f32({4}, 53).requires_grad_();
  EXPECT_TITAN_ERROR(autograd::backward_rebuilt({x * 2.0}, {x.detach()}), "backward_rebuilt",
                     "outside a backward");
}

TEST(ModuleForwardWrapper, RunsTheBodyBetweenTheHooks) {
  Block block(4, 8);
  std::vector<std::string> order;
  block.register_forward_pre_hook([&](nn::Module&) { order.push_back("pre"); });
  block.register_forward_hook([&](nn::Module&, Tensor&) { order.push_back("post"); });
  block.set_forward_wrapper([&](const nn::Module::ForwardBody& body, const Tensor& x) {
    order.push_back("wrapper");
    return body(x);
  });
  EXPECT_TRUE(block.has_forward_wrapper());
  Tensor x = test::rand_f32({2, 4}, 61);
  Tensor wrapped = block(x);
  EXPECT_EQ(order, (std::vector<std::string>{"pre", "wrapper", "post"}));
  block.set_forward_wrapper(nullptr);
  EXPECT_FALSE(block.has_forward_wrapper());
  EXPECT_EQ(block(x).to_vector<float>(), wrapped.to_vector<float>());
  EXPECT_EQ(order.size(), 5u);
}

TEST(ModuleForwardWrapper, ModuleThatCannotBeWrappedRefusesToRun) {
  nn::RMSNorm norm(4);
  norm.set_forward_wrapper([](const nn::Module::ForwardBody& body, const Tensor& x) { return body(x); });
  EXPECT_TITAN_ERROR(norm(test::rand_f32({1, 4}, 62)), "forward wrapper", "run_forward(x, body)");
}

TEST(ActivationCheckpoint, SelectiveWrapsEveryKthLayerCountingFromOne) {
  Stack model(6, 4, 8, 4);
  EXPECT_EQ(model.checkpointing(ActivationCheckpointMode::selective, 3), 2);
  std::vector<bool> wrapped;
  for (auto& layer : *model.layers) wrapped.push_back(layer->has_forward_wrapper());
  EXPECT_EQ(wrapped, (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_TITAN_ERROR(model.checkpointing(ActivationCheckpointMode::selective, 0), "at least 1");
}

TEST(ActivationCheckpoint, ParsesTheConfigModes) {
  EXPECT_EQ(parallel::parse_activation_checkpoint_mode("none"), ActivationCheckpointMode::none);
  EXPECT_EQ(parallel::parse_activation_checkpoint_mode("full"), ActivationCheckpointMode::full);
  EXPECT_EQ(parallel::parse_activation_checkpoint_mode("selective"), ActivationCheckpointMode::selective);
  EXPECT_TITAN_ERROR(parallel::parse_activation_checkpoint_mode("op"), "'op'", "none, full or selective");
}

}  // namespace
}  // namespace titan
