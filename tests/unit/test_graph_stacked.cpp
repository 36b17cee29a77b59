// Graph mode's stacked training state (train/graph_mode/stacked_state.h): the layers' parameters and moments
// live on the device as one [L, ...] buffer per kind, the layers' weights are rows of it that the
// program records only where something takes them one by one, and the step's program is the same
// size for any depth.
#include <gtest/gtest.h>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/graph/lazy.h"
#include "titan/models/llama3/model.h"
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

}  // namespace
}  // namespace titan::train
