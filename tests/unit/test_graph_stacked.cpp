// Graph mode's stacked training state (train/graph_mode/stacked_state.h): the layers' parameters and moments
// live on the device as one [L, ...] buffer per kind, the layers' weights are rows of it that the
// program records only where something takes them one by one, and the step's program is the same
// size for any depth.
#include <gtest/gtest.h>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "support/tiny_qwen3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/graph/lazy.h"
#include "titan/models/llama3/model.h"
#include "titan/models/qwen3/model.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/graph_mode/stacked_state.h"

namespace titan::train {
namespace {

namespace hlo = graph::hlo;

using test::occurrences;

// A row asked for costs nothing until an op takes it; first taken inside a loop's body, it is
// written before the loop, once, and serves the uses after the loop too.
TEST(GraphStacked, ARowIsRecordedOnceWhenFirstTaken) {
  graph::Program program;
  const graph::CaptureScope scope(program);
  const graph::Value stacked = program.parameter({3, 2}, kF32, "stacked", graph::InputKind::batch);
  const graph::Value r = program.row(stacked, 1);
  EXPECT_EQ(program.num_ops(), 0);
  ASSERT_TRUE(program.row_of(r).has_value());
  EXPECT_EQ(program.row_of(r)->stacked.id, stacked.id);
  EXPECT_EQ(program.row_of(r)->index, 1);
  EXPECT_FALSE(program.row_of(stacked).has_value());
  const std::vector<graph::Value> done = hlo::while_loop(
      {hlo::scalar(0.0, kI64), hlo::constant(0.0, {2}, kF32)},
      [](const std::vector<graph::Value>& s) { return hlo::compare(s[0], hlo::scalar(2.0, kI64), "LT"); },
      [&](const std::vector<graph::Value>& s) {
        return std::vector<graph::Value>{hlo::add(s[0], hlo::scalar(1.0, kI64)), hlo::add(s[1], r)};
      });
  const std::string text = program.module_text({hlo::add(done[1], r)});
  EXPECT_EQ(occurrences(text, "stablehlo.slice"), 1u) << text;
  EXPECT_LT(text.find("stablehlo.slice"), text.find("stablehlo.while")) << text;

  graph::Runner& runner = test::test_runner();
  graph::pjrt::Buffer in = runner.upload(Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2}));
  const std::vector<graph::pjrt::Buffer> out = runner.compile(text).executable->execute({&in});
  EXPECT_EQ(runner.download(out[0]).to_vector<float>(), (std::vector<float>{6, 9}));
}

// Each kind of layer parameter is one slot of L members in layer order; the others stay alone. A
// kind whose layers differ in weight decay is not stacked: one update serves a stack.
TEST(GraphStacked, PlanStacksEachKindOfLayerParameter) {
  models::llama3::ModelArgs args = test::tiny_llama3_args();
  args.n_layers = 3;
  models::llama3::Transformer model(args);
  const auto params = model.named_parameters();
  const std::vector<StateSlot> slots = plan_state(params, optim::AdamW(params), true);
  ASSERT_EQ(slots.size(), params.size() - 2 * (params.size() - 3) / 3);
  size_t stacks = 0;
  for (const StateSlot& slot : slots) {
    if (!slot.stacked) continue;
    ++stacks;
    ASSERT_EQ(slot.members.size(), 3u) << slot.name;
    for (size_t i = 0; i < 3; ++i) {
      std::string layer = "layers.";
      layer.append(std::to_string(i)).append(".");
      EXPECT_EQ(params[slot.members[i]].first.rfind(layer, 0), 0u) << slot.name;
    }
    EXPECT_EQ(slot.shape[0], 3) << slot.name;
  }
  EXPECT_EQ(stacks, (params.size() - 3) / 3);
  EXPECT_EQ(plan_state(params, optim::AdamW(params), false).size(), params.size());
  const optim::AdamW some_decay(params, {.no_decay = [](const std::string& name, const Tensor&) {
                                  return name.rfind("layers.1.", 0) == 0;
                                }});
  EXPECT_EQ(plan_state(params, some_decay, true).size(), params.size());
}

CapturedStep capture(int64_t layers, bool scan, size_t micro_batches = 1) {
  models::llama3::ModelArgs args = test::tiny_llama3_args();
  args.n_layers = layers;
  models::llama3::Transformer model(args);
  Generator gen(5);
  model.init_weights(gen);
  const auto params = model.named_parameters();
  const optim::AdamW optimizer(params);
  const data::Batch b{Tensor::zeros({2, 8}, {.dtype = kI64}), Tensor::zeros({2, 8}, {.dtype = kI64})};
  return capture_train_step(model, optimizer, params, std::vector<data::Batch>(micro_batches, b),
                            {.scan_layers = scan});
}

// The whole step — forward and backward loops, the norm, one AdamW per stack — is recorded once
// for any depth: the same ops, and a text that differs only in the digits of the depth.
TEST(GraphStacked, StepDoesNotGrowWithDepth) {
  const CapturedStep two = capture(2, true), six = capture(6, true);
  EXPECT_EQ(two.ops, six.ops);
  EXPECT_EQ(two.text.size(), six.text.size());
  EXPECT_EQ(occurrences(six.text, "stablehlo.concatenate"), occurrences(two.text, "stablehlo.concatenate"));
  // Unrolled, every layer is recorded and updated on its own.
  EXPECT_GT(capture(6, false).ops, capture(2, false).ops + 200);
  std::cout << "ops: " << two.ops << " (2 layers), " << six.ops << " (6 layers); unrolled "
            << capture(2, false).ops << ", " << capture(6, false).ops << "\n";
}

// With gradient accumulation each micro-batch's loop gives the layers' gradients as rows of its
// stacks; the stacks are summed whole, so the step still does not grow with depth.
TEST(GraphStacked, AccumulatedStepDoesNotGrowWithDepth) {
  const CapturedStep two = capture(2, true, 3), six = capture(6, true, 3);
  EXPECT_EQ(two.ops, six.ops);
  EXPECT_EQ(occurrences(six.text, "stablehlo.concatenate"), occurrences(two.text, "stablehlo.concatenate"));
  EXPECT_GT(two.ops, capture(2, true, 1).ops);
}

// A stacked GraphStep and a per-parameter one (compile.scan_layers = false) train the same:
// parameters and moments brought back to the host agree.
TEST(GraphStacked, StackedStateTrainsAsThePerParameterOne) {
  auto train = [](bool scan) {
    models::llama3::ModelArgs args = test::tiny_llama3_args();
    args.n_layers = 4;
    auto model = std::make_unique<models::llama3::Transformer>(args);
    Generator gen(5);
    model->init_weights(gen);
    auto optimizer =
        std::make_unique<optim::AdamW>(model->named_parameters(), optim::AdamWOptions{.lr = 1e-2});
    std::ostringstream log;
    GraphStep step(*model, *optimizer, model->named_parameters(),
                   {.runtime = test::test_runtime_options(), .scan_layers = scan}, log);
    std::vector<int64_t> ids(16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 11);
    data::Batch b{Tensor::from_vector(ids, {2, 8}), Tensor::from_vector(ids, {2, 8})};
    for (int s = 0; s < 3; ++s) step.run({b});
    step.to_host();
    return std::make_pair(std::move(model), std::move(optimizer));
  };
  const auto [stacked, stacked_opt] = train(true);
  const auto [each, each_opt] = train(false);
  const auto a = stacked->named_parameters(), b = each->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(test::max_relative_error(a[i].second, b[i].second), 1e-5) << a[i].first;
    EXPECT_LE(
        test::max_relative_error(stacked_opt->state(a[i].first).exp_avg, each_opt->state(b[i].first).exp_avg),
        1e-4)
        << a[i].first;
    EXPECT_LE(test::max_relative_error(stacked_opt->state(a[i].first).exp_avg_sq,
                                       each_opt->state(b[i].first).exp_avg_sq),
              1e-4)
        << a[i].first;
    EXPECT_EQ(stacked_opt->state(a[i].first).step, 3);
  }
}

// A tiny Qwen 3 MoE with the expert bias and the global load-balancing loss, the routers' biases
// differing from layer to layer enough to change their choices.
std::unique_ptr<models::qwen3::Transformer> tiny_moe(int64_t layers) {
  models::qwen3::ModelArgs args = test::tiny_qwen3_args(/*moe=*/true, layers);
  args.moe->load_balance_bias = true;
  args.moe->bias_update_rate = 0.05;
  args.load_balance_loss = nn::moe::LoadBalanceLoss::global;
  auto model = std::make_unique<models::qwen3::Transformer>(args);
  test::randomise(*model, 7);
  const autograd::NoGradGuard no_grad;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<float> bias;
    for (int64_t e = 0; e < 4; ++e) bias.push_back(0.2F * static_cast<float>((e + 3 * l) % 4) - 0.3F);
    (*model->layers)[static_cast<size_t>(l)].moe->router->expert_bias.copy_(Tensor::from_vector(bias, {4}));
  }
  return model;
}

data::Batch tiny_batch() {
  std::vector<int64_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 11);
  return {Tensor::from_vector(ids, {2, 8}), Tensor::from_vector(ids, {2, 8})};
}

// MoE layers loop too: their routing, grouped products and reports are written once for any depth.
TEST(GraphStacked, MoeLayersAreWrittenOnceForAnyDepth) {
  const auto text = [](int64_t layers, bool scan) {
    const auto model = tiny_moe(layers);
    const auto params = model->named_parameters();
    return capture_train_step(*model, optim::AdamW(params), params, {tiny_batch()}, {.scan_layers = scan})
        .text;
  };
  const size_t two = occurrences(text(2, true), "titan_grouped_swiglu_fwd");
  EXPECT_GE(two, 1u);
  EXPECT_EQ(occurrences(text(5, true), "titan_grouped_swiglu_fwd"), two);
  EXPECT_GT(occurrences(text(5, false), "titan_grouped_swiglu_fwd"),
            occurrences(text(2, false), "titan_grouped_swiglu_fwd"));
}

// After the loop the step reads each layer's reports (its counts, its term of the loss): a few ops
// per layer, never a sum over every layer's choices for each layer's term of the global loss.
TEST(GraphStacked, MoeReportsCostTheStepOpsLinearInDepth) {
  const auto ops = [](int64_t layers) {
    const auto model = tiny_moe(layers);
    const auto params = model->named_parameters();
    return capture_train_step(*model, optim::AdamW(params), params, {tiny_batch()}, {.scan_layers = true})
        .ops;
  };
  const int64_t two = ops(2), four = ops(4), six = ops(6);
  EXPECT_EQ(six - four, four - two);
  EXPECT_LE(four - two, 2 * 20) << "at most 20 ops per layer";
}

// Trained in the layer loop, each MoE layer chooses with its own expert bias and gets back its own
// expert counts (which update its bias between steps) and its part of the pooled load-balancing
// loss, as when every layer is recorded.
TEST(GraphStacked, MoeLayersInTheLoopTrainAsRecordedOneByOne) {
  struct Run {
    std::vector<GraphStep::Result> steps;
    std::vector<std::vector<int64_t>> counts;  // per step and layer
  };
  const auto train = [](bool scan) {
    const auto model = tiny_moe(3);
    optim::AdamW optimizer(model->named_parameters(), optim::AdamWOptions{.lr = 1e-2});
    std::ostringstream log;
    GraphStep step(*model, optimizer, model->named_parameters(),
                   {.runtime = test::test_runtime_options(), .scan_layers = scan}, log);
    Run r;
    for (int s = 0; s < 3; ++s) {
      r.steps.push_back(step.run({tiny_batch()}));
      for (size_t l = 0; l < 3; ++l) r.counts.push_back((*model->layers)[l].moe->end_step());
    }
    return r;
  };
  const Run loop = train(true), each = train(false);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_LE(std::abs(loop.steps[s].loss - each.steps[s].loss), 1e-5 * std::abs(each.steps[s].loss)) << s;
    ASSERT_TRUE(loop.steps[s].aux_loss.has_value());
    EXPECT_NEAR(*loop.steps[s].aux_loss, *each.steps[s].aux_loss, 1e-6) << s;
    EXPECT_NEAR(loop.steps[s].grad_norm, each.steps[s].grad_norm, 1e-4 * each.steps[s].grad_norm) << s;
  }
  EXPECT_EQ(loop.counts, each.counts);
  // The layers' biases differ, and so do their choices: a loop reading one layer's for all would
  // not match.
  EXPECT_NE(each.counts[0], each.counts[1]);
}

}  // namespace
}  // namespace titan::train
