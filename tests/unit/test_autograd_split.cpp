// The split backward of zero-bubble pipeline schedules (autograd/engine.h): B (backward_split)
// then W (DeferredWeightGrads::run) gives the gradients of one backward bit for bit, for an MLP, a
// Llama 3 and a Qwen 3 MoE stage, first stage and middle stage, with and without activation
// checkpointing; B leaves the parameters alone; W recomputes no activation gradient (counted in
// GEMM flops from a trace).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "support/tiny_qwen3.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/engine.h"
#include "titan/core/rng.h"
#include "titan/models/common/attention.h"
#include "titan/models/llama3/model.h"
#include "titan/models/qwen3/model.h"
#include "titan/nn/linear.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan {
namespace {

using autograd::DeferredWeightGrads;
using test::same_bits;
using test::tokens_of;

std::map<std::string, Tensor> grads_of(nn::Module& m) {
  std::map<std::string, Tensor> g;
  for (auto& [name, p] : m.named_parameters()) g[name] = p.grad().defined() ? p.grad().clone() : Tensor();
  return g;
}

void expect_grads(nn::Module& m, const std::map<std::string, Tensor>& want, const std::string& when) {
  for (auto& [name, p] : m.named_parameters()) {
    const Tensor& w = want.at(name);
    if (!w.defined()) {
      EXPECT_FALSE(p.grad().defined()) << when << ": " << name;
      continue;
    }
    ASSERT_TRUE(p.grad().defined()) << when << ": " << name << " has no gradient";
    EXPECT_TRUE(same_bits(p.grad(), w))
        << when << ": " << name << " differs, by up to " << test::max_rel_error(p.grad(), w) << " (relative)";
  }
}

// Two micro-batches through `loss` and the stage's `inputs` (leaves the loss reads, made anew by
// `make_inputs` for each micro-batch): split, each B then W, against plain backward for the
// parameters and autograd::grad for the inputs, bit for bit; parameters untouched by B.
void expect_split_is_backward(nn::Module& m, const std::function<std::vector<Tensor>()>& make_inputs,
                              const std::function<Tensor(const std::vector<Tensor>&)>& loss) {
  auto seed = [](const Tensor& l) { return Tensor::ones(l.sizes(), l.options()); };
  std::vector<Tensor> inputs = make_inputs();
  std::vector<Tensor> want_inputs;
  if (!inputs.empty()) {
    Tensor l = loss(inputs);
    want_inputs = autograd::grad({l}, {seed(l)}, inputs);
  }
  m.zero_grad();
  loss(make_inputs()).backward();
  const std::map<std::string, Tensor> want_one = grads_of(m);
  loss(make_inputs()).backward();
  const std::map<std::string, Tensor> want_two = grads_of(m);

  m.zero_grad();
  const std::map<std::string, Tensor> none = grads_of(m);
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    const std::string when = "micro-batch " + std::to_string(micro_batch);
    DeferredWeightGrads deferred;
    inputs = make_inputs();
    Tensor l = loss(inputs);
    std::vector<Tensor> got_inputs = autograd::backward_split({l}, {seed(l)}, inputs, deferred);
    ASSERT_EQ(got_inputs.size(), want_inputs.size());
    for (size_t i = 0; i < got_inputs.size(); ++i)
      EXPECT_TRUE(same_bits(got_inputs[i], want_inputs[i]))
          << when << ": input " << i << " differs, by up to "
          << test::max_rel_error(got_inputs[i], want_inputs[i]) << " (relative)";
    for (const Tensor& in : inputs) EXPECT_FALSE(in.grad().defined()) << "an input's gradient is returned";
    expect_grads(m, micro_batch == 0 ? none : want_one, when + ", before W");
    ASSERT_FALSE(deferred.empty());
    deferred.run();
    EXPECT_TRUE(deferred.empty());
    expect_grads(m, micro_batch == 0 ? want_one : want_two, when + ", after W");
  }
}

// ---- an MLP --------------------------------------------------------------------------------------

// `layers` Linear layers with GELU between them, the whole stack applied `repeats` times (shared
// weights: each gets a gradient per use, summed in an order W must keep).
struct Mlp : nn::Module {
  Mlp(int64_t width, int layers, bool bias, int repeats = 1) : repeats(repeats) {
    Generator gen(3);
    for (int i = 0; i < layers; ++i) {
      auto l = register_module(std::to_string(i), std::make_shared<nn::Linear>(width, width, bias));
      l->init_weights(gen);
      linears.push_back(l);
    }
  }
  Tensor forward(const Tensor& x) {
    Tensor h = x;
    for (int r = 0; r < repeats; ++r)
      for (const auto& l : linears) h = ops::gelu((*l)(h));
    return h;
  }
  std::vector<std::shared_ptr<nn::Linear>> linears;
  int repeats;
};

Tensor mlp_loss(Mlp& m, const Tensor& x) {
  Tensor y = m.forward(x);
  return ops::sum(y * y);
}

TEST(SplitBackward, MlpMiddleStageMatchesBackward) {
  Mlp m(24, 3, true, /*repeats=*/3);
  expect_split_is_backward(
      m,
      [] {
        return std::vector<Tensor>{test::rand_f32({5, 24}, 1).requires_grad_()};
      },
      [&](const std::vector<Tensor>& in) { return mlp_loss(m, in[0]); });
}

TEST(SplitBackward, LargeLayersKeepTheirBits) {
  // Large enough for BLAS to thread a GEMM run alone: B's and W's must still run as one backward
  // runs them (side by side, or not), or the low bits differ.
  Mlp m(320, 2, true);
  expect_split_is_backward(
      m,
      [] {
        return std::vector<Tensor>{test::rand_f32({288, 320}, 1).requires_grad_()};
      },
      [&](const std::vector<Tensor>& in) { return mlp_loss(m, in[0]); });
}

TEST(SplitBackward, MlpFirstStageMatchesBackward) {
  // No input requires grad: B computes the activation gradients, W every weight's.
  Mlp m(24, 3, false);
  expect_split_is_backward(
      m, [] { return std::vector<Tensor>{}; },
      [&](const std::vector<Tensor>&) {
        return mlp_loss(m, test::rand_f32({5, 24}, 1));
      });
}

// ---- Llama 3 and Qwen 3 stages ----------------------------------------------------------------

models::llama3::ModelArgs llama_args() { return test::tiny_llama3_args(); }

void checkpoint_blocks(nn::Module& layers) {
  parallel::apply_activation_checkpointing(layers, parallel::ActivationCheckpointMode::full);
}

Tensor tokens() {
  return tokens_of({1, 5, 2, 9, 0, 3, 7, 4}, 2);
}
Tensor targets() {
  return tokens_of({5, 2, 9, 0, 3, 7, 4, 1}, 2);
}

class SplitBackwardModels : public ::testing::TestWithParam<bool> {
 protected:
  bool checkpointed() const { return GetParam(); }
};

TEST_P(SplitBackwardModels, Llama3FirstStage) {
  // From the tokens: the embedding is a weight node, so its gradient is all W's.
  models::llama3::Transformer m(llama_args());
  Generator gen(5);
  m.init_weights(gen);
  if (checkpointed()) checkpoint_blocks(*m.layers);
  expect_split_is_backward(
      m, [] { return std::vector<Tensor>{}; },
      [&](const std::vector<Tensor>&) { return ops::cross_entropy(m(tokens()), targets()); });
}

TEST_P(SplitBackwardModels, Llama3LastStageFromReceivedActivations) {
  const models::llama3::ModelArgs args = llama_args();
  models::llama3::Transformer m(args);
  Generator gen(6);
  m.init_weights(gen);
  if (checkpointed()) checkpoint_blocks(*m.layers);
  const ops::RopeTable rope =
      ops::RopeTable::build(args.head_dim(), args.max_seq_len, args.rope_theta, args.rope_scaling_if_used());
  const auto mask = models::common::layer_mask(tokens(), Tensor(), {});
  expect_split_is_backward(
      m,
      [&] {
        return std::vector<Tensor>{test::rand_f32({2, 4, args.dim}, 7).requires_grad_()};
      },
      [&](const std::vector<Tensor>& in) {
        Tensor h = in[0];
        for (const auto& layer : *m.layers) h = (*layer)(h, rope, mask);
        return ops::cross_entropy((*m.output)((*m.norm)(h)), targets());
      });
}

TEST_P(SplitBackwardModels, Qwen3MoEFirstStageWithTiedEmbeddingsAndAuxiliaryLoss) {
  models::qwen3::ModelArgs args = test::tiny_qwen3_args(true);
  args.tie_embeddings = true;  // the embedding weight is both a weight node's and a linear's
  models::qwen3::Transformer m(args);
  test::randomise(m, 8);
  if (checkpointed()) checkpoint_blocks(*m.layers);
  expect_split_is_backward(
      m, [] { return std::vector<Tensor>{}; },
      [&](const std::vector<Tensor>&) {
        Tensor loss = ops::cross_entropy(m(tokens()), targets());
        return loss + m.auxiliary_loss();
      });
}

TEST_P(SplitBackwardModels, Qwen3MoEMiddleStage) {
  const models::qwen3::ModelArgs args = test::tiny_qwen3_args(true);
  models::qwen3::Transformer m(args);
  test::randomise(m, 9);
  if (checkpointed()) checkpoint_blocks(*m.layers);
  const ops::RopeTable rope = ops::RopeTable::build(args.head_dim, args.max_seq_len, args.rope_theta);
  const auto mask = models::common::layer_mask(tokens(), Tensor(), {});
  const Tensor probe = test::rand_f32({2, 4, args.dim}, 11);
  expect_split_is_backward(
      m,
      [&] {
        return std::vector<Tensor>{test::rand_f32({2, 4, args.dim}, 10).requires_grad_()};
      },
      [&](const std::vector<Tensor>& in) {
        auto pass = std::make_shared<nn::moe::MoEPass>();
        pass->aux_loss_weight = 0.25;
        Tensor h = in[0];
        for (const auto& layer : *m.layers) h = (*layer)(h, rope, mask, pass);
        return ops::sum(h * probe) + pass->aux_losses.total();
      });
}

INSTANTIATE_TEST_SUITE_P(, SplitBackwardModels, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Checkpointed" : "Plain"; });

// ---- cost: W recomputes nothing ---------------------------------------------------------------

TEST(SplitBackward, BAndWTogetherIssueTheGemmsOfOneBackward) {
  const int layers = 6;
  const int64_t width = 96, rows = 80;
  Mlp m(width, layers, false);
  auto x = [&] { return test::rand_f32({rows, width}, 2).requires_grad_(); };
  Tensor plain_loss = mlp_loss(m, x());
  const test::TracedGemms plain = test::traced_sgemms([&] { plain_loss.backward(); });

  DeferredWeightGrads deferred;
  Tensor input = x();
  Tensor loss = mlp_loss(m, input);
  const test::TracedGemms b =
      test::traced_sgemms([&] { autograd::backward_split({loss}, {Tensor::ones({})}, {input}, deferred); });
  const test::TracedGemms w = test::traced_sgemms([&] { deferred.run(); });

  const int64_t one_gemm = 2 * rows * width * width;
  EXPECT_EQ(plain.calls, 2 * layers);
  EXPECT_EQ(b.calls, layers);  // each layer's input gradient
  EXPECT_EQ(w.calls, layers);  // each layer's weight gradient
  EXPECT_EQ(b.flops, layers * one_gemm);
  EXPECT_EQ(w.flops, layers * one_gemm);
  EXPECT_EQ(b.flops + w.flops, plain.flops);
}

TEST(SplitBackward, WRebuildsNoCheckpointedBlock) {
  // B re-runs the body to go back through it; W asks the rebuilt nodes B kept.
  Mlp m(16, 2, false);
  int runs = 0;
  auto body = [&](const Tensor& h) {
    ++runs;
    return m.forward(h);
  };
  DeferredWeightGrads deferred;
  Tensor x = test::rand_f32({4, 16}, 5).requires_grad_();
  Tensor y = autograd::checkpoint(body, x);
  Tensor loss = ops::sum(y * y);
  EXPECT_EQ(runs, 1);
  autograd::backward_split({loss}, {Tensor::ones({})}, {x}, deferred);
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(m.linears[0]->weight.grad().defined());
  deferred.run();
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(m.linears[0]->weight.grad().defined());
}

// ---- what is refused ------------------------------------------------------------------------------

TEST(SplitBackward, RefusesAFullDeferredAndAParameterAsRoot) {
  Mlp m(8, 2, false);
  DeferredWeightGrads deferred;
  Tensor x = test::rand_f32({3, 8}, 4).requires_grad_();
  Tensor loss = mlp_loss(m, x);
  autograd::backward_split({loss}, {Tensor::ones({})}, {x}, deferred);
  Tensor again = mlp_loss(m, x);
  EXPECT_TITAN_ERROR(autograd::backward_split({again}, {Tensor::ones({})}, {x}, deferred), "backward_split",
                     "run() them first");
  deferred.run();
  const Tensor& w = m.linears[0]->weight;
  EXPECT_TITAN_ERROR(autograd::backward_split({w}, {Tensor::ones(w.sizes())}, {}, deferred), "is a parameter",
                     "backward()");
}

}  // namespace
}  // namespace titan
