// Graph mode over several devices (the base of issue 21): a step captured as usual, its parameters
// and results annotated with shardings, compiled for 4 CPU devices of one process and split there
// by XLA's SPMD partitioner, gives what the same program gives on one device. Here a linear
// layer's forward and backward, data parallel on the batch and FSDP on the weight (each device
// holds a quarter of its rows, and of its gradient).
#include <gtest/gtest.h>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/graph/lazy.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using graph::Sharding;

struct Captured {
  std::string text = {};
  std::vector<Tensor> inputs = {};  // in the program's parameter order
  std::vector<Sharding> input_shardings = {}, result_shardings = {};
};

// y = x w^T, loss = sum(y * r); results y, dL/dw and loss.
Captured capture_linear(int64_t partitions, const Tensor& x, const Tensor& w, const Tensor& r) {
  graph::Program program;
  program.set_partitions(partitions);
  const Sharding rows{{partitions, 1}};
  Captured c{.inputs = {x, w, r}, .input_shardings = {rows, rows, rows}, .result_shardings = {rows, rows, Sharding{}}};
  std::vector<graph::Value> results;
  {
    graph::CaptureScope scope(program);
    graph::BoundTensors bound;
    const char* names[] = {"x", "w", "r"};
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const graph::Value v =
          program.parameter(c.inputs[i].sizes(), kF32, names[i], graph::InputKind::batch);
      if (partitions > 1) program.shard(v, c.input_shardings[i]);
      bound.bind(c.inputs[i], v);
    }
    w.set_grad(Tensor());
    const Tensor y = ops::linear(x, w);
    const Tensor loss = ops::sum(ops::mul(y, r));
    loss.backward();
    results = {graph::value_of(y, "y"), graph::value_of(w.grad(), "dw"), graph::value_of(loss, "loss")};
  }
  w.set_grad(Tensor());
  c.text = program.module_text(results, {}, partitions > 1 ? c.result_shardings : std::vector<Sharding>{});
  return c;
}

TEST(GraphSharded, LinearForwardAndBackwardOverFourDevicesMatchesOne) {
  const graph::RuntimeOptions base = test::test_runtime_options();
  if (base.plugin != "cpu") GTEST_SKIP() << "4 devices come from the CPU plugin's device count";
  graph::Runner runner({.plugin = "cpu", .client_options = {{"cpu_device_count", int64_t{4}}}});
  ASSERT_EQ(runner.client().device_count(), 4);
  const Tensor x = test::rand_f32({8, 16}, 1), w = test::rand_f32({12, 16}, 2).requires_grad_(),
               r = test::rand_f32({8, 12}, 3);

  const Captured one = capture_linear(1, x, w, r);
  std::vector<graph::pjrt::Buffer> args;
  for (const Tensor& t : one.inputs) args.push_back(runner.upload(t));
  std::vector<graph::pjrt::Buffer*> arg_ptrs;
  for (auto& b : args) arg_ptrs.push_back(&b);
  const std::vector<graph::pjrt::Buffer> ref = runner.compile(one.text).executable->execute(arg_ptrs);

  const Captured four = capture_linear(4, x, w, r);
  EXPECT_NE(four.text.find("mhlo.num_partitions = 4"), std::string::npos) << four.text;
  EXPECT_NE(four.text.find("mhlo.sharding = \"{devices=[4,1]0,1,2,3}\""), std::string::npos) << four.text;
  std::vector<std::vector<graph::pjrt::Buffer>> shards(4);
  std::vector<std::vector<graph::pjrt::Buffer*>> per_device(4);
  for (int d = 0; d < 4; ++d) {
    for (size_t i = 0; i < four.inputs.size(); ++i)
      shards[d].push_back(runner.upload(graph::shard_of(four.inputs[i], four.input_shardings[i], d), d));
    for (auto& b : shards[d]) per_device[d].push_back(&b);
  }
  const auto out = runner.compile(four.text, 4).executable->execute_partitioned(per_device);
  for (size_t k = 0; k < ref.size(); ++k) {
    std::vector<Tensor> pieces;
    for (int d = 0; d < 4; ++d) pieces.push_back(runner.download(out[d][k]));
    if (!four.result_shardings[k].replicated()) {
      EXPECT_EQ(pieces[0].size(0), runner.download(ref[k]).size(0) / 4) << "result " << k << " is split 4 ways";
    }
    EXPECT_TRUE(test::tensors_close(graph::unshard(pieces, four.result_shardings[k]), runner.download(ref[k]), 1e-5,
                                    "result " + std::to_string(k)));
  }
}

TEST(GraphSharded, AShardingThatCannotSplitItsParameterIsNamed) {
  graph::Program program;
  program.set_partitions(4);
  const graph::Value v = program.parameter({6, 8}, kF32, "wq", graph::InputKind::state);
  EXPECT_TITAN_ERROR(program.shard(v, Sharding{{4, 1}}), "parameter 'wq'", "dim 0 of size 6", "4 equal pieces");
  EXPECT_TITAN_ERROR(program.shard(v, Sharding{{2, 1}}), "split into 2 pieces", "spans 4 devices");
  EXPECT_TITAN_ERROR(program.shard(v, Sharding{{4}}), "one count per dim");
}

}  // namespace
}  // namespace titan
