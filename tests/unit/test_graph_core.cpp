// Graph mode's core: lazy tensors record the ops that have lowerings (arithmetic, reductions,
// views, copies, matrix products), and the captured program, compiled and run through the PJRT
// plugin, gives the eager kernels' numbers, forward and backward. Ops without a lowering, host
// tensors meeting captured ones and reads of captured values are clear errors.
#include <gtest/gtest.h>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/autograd/scan.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

Tensor random(const Shape& shape, uint64_t seed, DType dtype = kF32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, {.dtype = dtype});
}

// Every output and gradient within `tol` (relative to its largest eager element).
void expect_agree(const Fn& fn, const std::vector<Tensor>& inputs, double tol, bool grads = true) {
  const test::GraphEager r = test::run_eager_and_graph(fn, inputs, grads);
  ASSERT_EQ(r.eager.size(), r.graph.size());
  for (size_t i = 0; i < r.eager.size(); ++i) {
    ASSERT_EQ(r.eager[i].sizes(), r.graph[i].sizes()) << "result " << i;
    ASSERT_EQ(r.eager[i].dtype(), r.graph[i].dtype()) << "result " << i;
    EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), tol) << "result " << i << " " << r.eager[i].desc();
  }
}

TEST(GraphCore, ArithmeticWithBroadcastingForwardAndBackward) {
  expect_agree(
      [](const std::vector<Tensor>& x) {
        Tensor a = ops::add(x[0], x[1]), b = ops::mul(x[0], x[1]), c = ops::div(x[0], ops::add_scalar(ops::square(x[1]), 1.0));
        return std::vector<Tensor>{a, ops::sub(b, x[1]), c, ops::scale(ops::exp(ops::neg(x[0])), 0.5),
                                   ops::sqrt(ops::add_scalar(ops::square(x[0]), 2.0)),
                                   ops::log(ops::add_scalar(ops::square(x[1]), 1.0))};
      },
      {random({3, 5, 7}, 1), random({5, 1}, 2)}, 1e-6);
}

TEST(GraphCore, ReductionsForwardAndBackward) {
  expect_agree(
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{ops::sum(x[0], 1, false), ops::mean(x[0], -1, true), ops::sum(x[0]),
                                   ops::mean(x[0])};
      },
      {random({4, 9, 5}, 3)}, 1e-6);
}

TEST(GraphCore, ViewsForwardAndBackward) {
  expect_agree(
      [](const std::vector<Tensor>& x) {
        const Tensor& t = x[0];
        return std::vector<Tensor>{t.view({6, 5}), t.transpose(0, 2).contiguous(), t.permute({1, 2, 0}),
                                   t.narrow(2, 1, 3), t.narrow(0, 1, 1).expand({4, 3, 5}),
                                   t.unsqueeze(1).squeeze(1).flatten(), t.clone()};
      },
      {random({2, 3, 5}, 4)}, 0.0);
}

TEST(GraphCore, MatrixProductsForwardAndBackward) {
  expect_agree(
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{ops::matmul(x[0], x[1]), ops::linear(x[2], x[3], x[4]),
                                   ops::linear(x[2].view({2, 3, 7}), x[3], Tensor())};
      },
      {random({2, 5, 7}, 5), random({7, 3}, 6), random({6, 7}, 7), random({11, 7}, 8), random({11}, 9)}, 1e-5);
}

// Under autocast the products take bf16 operands with float32 results, as eager's do; both round
// the same operands, so they agree to float32 accumulation order.
TEST(GraphCore, Bf16ProductsUnderAutocast) {
  TITAN_SKIP_WITHOUT_BF16();  // the eager side's kernels
  const AutocastGuard bf16(kBF16);
  const test::GraphEager r = test::run_eager_and_graph(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{ops::linear(x[0], x[1], Tensor())}; },
      {random({16, 32}, 10), random({24, 32}, 11)}, true);
  ASSERT_EQ(r.graph.size(), 3u);
  EXPECT_EQ(r.graph[0].dtype(), kF32);
  for (size_t i = 0; i < 3; ++i) EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 1e-5) << i;
}

TEST(GraphCore, CastsRoundTrip) {
  expect_agree([](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].to(kBF16).to(kF32), x[0].to(kF64)}; },
               {random({3, 4}, 12)}, 0.0);
}

TEST(GraphCore, OpWithoutLoweringNamesTheOp) {
  graph::Program program;
  graph::CaptureScope scope(program);
  Tensor t = graph::tensor_of(program.parameter({4, 4}, kF32, "x", graph::InputKind::batch));
  EXPECT_TITAN_ERROR(ops::var(t, 0, false, 1), "var", "has no lowering to StableHLO");
}

TEST(GraphCore, HostTensorMeetingACapturedOneIsRefused) {
  graph::Program program;
  graph::CaptureScope scope(program);
  Tensor t = graph::tensor_of(program.parameter({4}, kF32, "x", graph::InputKind::batch));
  EXPECT_TITAN_ERROR(ops::add(t, Tensor::ones({4})), "add", "is on cpu", "move it into the step");
}

TEST(GraphCore, ReadingACapturedValueIsRefused) {
  graph::Program program;
  graph::CaptureScope scope(program);
  Tensor t = graph::tensor_of(program.parameter({}, kF32, "x", graph::InputKind::batch));
  EXPECT_TITAN_ERROR(t.item(), "is on pjrt:0", "no memory on the host");
}

TEST(GraphCore, CapturedValuesOutliveNoCapture) {
  Tensor t;
  {
    graph::Program program;
    graph::CaptureScope scope(program);
    t = graph::tensor_of(program.parameter({2}, kF32, "x", graph::InputKind::batch));
  }
  EXPECT_TITAN_ERROR(ops::neg(t), "outside a capture");
}

// The module is what the plugins parse: one @main over the parameters, aliases on donated ones.
TEST(GraphCore, ModuleTextNamesParametersAndAliases) {
  graph::Program program;
  graph::CaptureScope scope(program);
  const graph::Value p = program.parameter({3}, kF32, "w", graph::InputKind::state);
  const graph::Value g = program.parameter({3}, kF32, "g", graph::InputKind::batch);
  const std::string text = program.module_text({graph::hlo::sub(p, g)}, {{0, 0}});
  EXPECT_NE(text.find("%arg0: tensor<3xf32> {tf.aliasing_output = 0 : i32}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"stablehlo.subtract\"(%arg0, %arg1)"), std::string::npos) << text;
}

}  // namespace
}  // namespace titan

namespace titan {
namespace {

// Blocks x -> x + tanh-free MLP of their own weights: the loop (scan_blocks in a program that asks
// for it) gives what the blocks one by one give, eagerly and unrolled, forward and backward, and
// its module holds one copy of the block's ops however many blocks there are.
TEST(GraphScan, LoopOverIdenticalBlocksMatchesEagerAndUnrolled) {
  const int64_t d = 6, n = 4;
  std::vector<Tensor> inputs{random({3, d}, 20)};
  for (int64_t i = 0; i < n; ++i) {
    inputs.push_back(random({d, d}, 21 + static_cast<uint64_t>(i)));
    inputs.push_back(random({d}, 31 + static_cast<uint64_t>(i)));
  }
  const Fn blocks = [n](const std::vector<Tensor>& x) {
    std::vector<std::vector<Tensor>> params;
    for (int64_t i = 0; i < n; ++i) params.push_back({x[static_cast<size_t>(1 + 2 * i)], x[static_cast<size_t>(2 + 2 * i)]});
    Tensor h = autograd::scan_blocks(x[0], params, [params](size_t i, const Tensor& v) {
      return ops::add(v, ops::mul(ops::linear(v, params[i][0], params[i][1]), ops::scale(v, 0.5)));
    });
    return std::vector<Tensor>{h};
  };
  const auto check = [](const test::GraphEager& r) {
    ASSERT_EQ(r.graph.size(), r.eager.size());
    for (size_t i = 0; i < r.eager.size(); ++i)
      EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 1e-5) << "result " << i;
  };
  {
    SCOPED_TRACE("unrolled");
    check(test::run_eager_and_graph(blocks, inputs, true, false));
  }
  // The block's one product: once in the forward's loop and twice (dx, dW) in the backward's, plus
  // once more there when only the inputs are kept and the backward computes the block again.
  for (const auto& [saves, name] : test::kAllScanSaves) {
    SCOPED_TRACE(name);
    const test::GraphEager r = test::run_eager_and_graph(blocks, inputs, true, true, false, saves);
    check(r);
    EXPECT_EQ(test::occurrences(r.module, "stablehlo.dot_general"), saves == graph::ScanSaves::inputs ? 4u : 3u);
  }
  // The loop's program does not grow with the number of blocks.
  auto ops_for = [&](int64_t blocks_n) {
    graph::Program program;
    program.set_scan_layers(true);
    graph::CaptureScope scope(program);
    Tensor x = graph::tensor_of(program.parameter({3, d}, kF32, "x", graph::InputKind::batch));
    std::vector<std::vector<Tensor>> params;
    for (int64_t i = 0; i < blocks_n; ++i)
      params.push_back({graph::tensor_of(program.parameter({d, d}, kF32, "w", graph::InputKind::batch)).requires_grad_()});
    Tensor h = autograd::scan_blocks(x, params, [params](size_t i, const Tensor& v) {
      return ops::linear(v, params[i][0], Tensor());
    });
    ops::sum(h).backward();
    return program.num_ops();
  };
  EXPECT_LT(ops_for(16) - ops_for(4), 40) << "the loop's body is recorded once";
}

// The backward writes the block a second time and takes the forward's saved results op by op: a
// block that computes something else the second time is an error naming the op, not a gradient
// of the wrong function.
TEST(GraphScan, ABlockThatChangesBetweenRunsIsAnError) {
  graph::Program program;
  program.set_scan_layers(true);
  graph::CaptureScope scope(program);
  Tensor x = graph::tensor_of(program.parameter({3, 4}, kF32, "x", graph::InputKind::batch));
  std::vector<std::vector<Tensor>> params;
  for (int i = 0; i < 2; ++i)
    params.push_back({graph::tensor_of(program.parameter({4, 4}, kF32, "w", graph::InputKind::batch)).requires_grad_()});
  auto runs = std::make_shared<int>(0);
  Tensor h = autograd::scan_blocks(x, params, [params, runs](size_t i, const Tensor& v) {
    const Tensor y = ops::linear(v, params[i][0], Tensor());
    return ++*runs == 1 ? ops::mul(y, y) : ops::add(y, y);
  });
  EXPECT_TITAN_ERROR(ops::sum(h).backward(), "stablehlo.multiply in the forward and is stablehlo.add",
                    "same function each run");
}

}  // namespace
}  // namespace titan
