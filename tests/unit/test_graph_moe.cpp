// The lowerings of a mixture-of-experts layer's ops against their eager kernels: top-k routing
// (ties, the expert bias), the expert counts and capacity slots, the sort into expert order, the
// grouped products (of equal groups, and of groups whose sizes are data, as custom calls), and
// both dispatchers' whole layer, outputs and gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/core/autocast.h"
#include "titan/nn/moe/token_dispatcher.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/moe.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

constexpr double kF32Tol = 1e-5;

// With grads, every floating input's gradient too.
void expect_matches(const Fn& fn, const std::vector<Tensor>& inputs, double tol, const std::string& what,
                    bool with_grads = true, bool custom_kernels = false) {
  const test::GraphEager r = test::run_eager_and_graph(fn, inputs, with_grads, /*scan_layers=*/false, custom_kernels);
  ASSERT_EQ(r.eager.size(), r.graph.size()) << what;
  for (size_t i = 0; i < r.eager.size(); ++i)
    EXPECT_TRUE(test::tensors_close(r.graph[i], r.eager[i], tol, what + " #" + std::to_string(i)));
}

// Values on a grid of quarters in [lo, lo + 2), so that many tie: the lowest expert index must win
// each tie.
Tensor quarters(const Shape& shape, uint64_t seed, double lo) {
  std::vector<float> v(static_cast<size_t>(numel_of(shape)));
  for (float& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(lo + 0.25 * static_cast<double>((seed >> 33) % 8));
  }
  return Tensor::from_vector(v, shape);
}

TEST(GraphMoE, TopKExpertsWithTiesAndABias) {
  const int64_t tokens = 13, experts = 7;
  const Tensor scores = quarters({tokens, experts}, 1, 0.0), bias = quarters({experts}, 2, -1.0);
  for (int64_t k : {1, 2, 3, 7}) {
    for (bool with_bias : {false, true}) {
      const std::string what = "k " + std::to_string(k) + (with_bias ? " with bias" : "");
      std::vector<Tensor> in{scores};
      if (with_bias) in.push_back(bias);
      expect_matches(
          [k](const std::vector<Tensor>& v) {
            const ops::TopKExperts top = ops::topk_experts(v[0], k, v.size() > 1 ? v[1].detach() : Tensor());
            return std::vector<Tensor>{top.weights, top.ids.to(kF32)};
          },
          // The bias only chooses: it has no gradient.
          in, 0.0, what, /*with_grads=*/!with_bias);
    }
  }
}

// ids [tokens, k] of distinct experts per token.
Tensor routes(int64_t tokens, int64_t experts, int64_t k, uint64_t seed) {
  return ops::topk_experts(test::rand_f32({tokens, experts}, seed), k).ids;
}

TEST(GraphMoE, ExpertCountsAndSlotsAtEveryCapacity) {
  const int64_t tokens = 19, experts = 5, k = 2;
  const Tensor ids = routes(tokens, experts, k, 3);
  for (int64_t capacity : {int64_t{1}, int64_t{3}, int64_t{8}, tokens}) {
    expect_matches(
        [&](const std::vector<Tensor>& v) {
          const ops::ExpertSlots s = ops::expert_slots(v[0], experts, capacity);
          return std::vector<Tensor>{ops::expert_counts(v[0], experts).to(kF32), s.token_of_slot.to(kF32),
                                     s.slot_of_pair.to(kF32), s.pair_kept, s.dropped.to(kF32)};
        },
        {ids}, 0.0, "capacity " + std::to_string(capacity), /*with_grads=*/false);
  }
}

TEST(GraphMoE, GroupedLinearAndSwigluOfEqualGroups) {
  const int64_t groups = 3, rows = 5, in = 11, hidden = 6;
  const std::vector<int64_t> sizes(groups, rows);
  const Tensor x = test::rand_f32({groups * rows, in}, 4), w1 = test::rand_f32({groups, hidden, in}, 5),
               w3 = test::rand_f32({groups, hidden, in}, 6), w2 = test::rand_f32({groups, in, hidden}, 7);
  expect_matches(
      [&](const std::vector<Tensor>& v) {
        const Tensor h = ops::grouped_swiglu(v[0], v[1], v[2], sizes);
        return std::vector<Tensor>{h, ops::grouped_linear(h, v[3], sizes)};
      },
      {x, w1, w3, w2}, kF32Tol, "grouped swiglu then linear");
}

TEST(GraphMoE, UnequalGroupsAreRefusedInACapturedStep) {
  const Tensor x = test::rand_f32({5, 4}, 8), w = test::rand_f32({2, 3, 4}, 9);
  EXPECT_TITAN_ERROR(test::run_eager_and_graph(
                         [](const std::vector<Tensor>& v) {
                           return std::vector<Tensor>{ops::grouped_linear(v[0], v[1], {2, 3})};
                         },
                         {x, w}),
                     "grouped_linear", "one size");
}

// The whole layer as the capacity dispatcher runs it: router, top-k, slots, expert products and the
// weighted combine; with room for every token, and with a capacity that drops pairs.
TEST(GraphMoE, CapacityLayerMatchesEager) {
  const int64_t tokens = 23, dim = 8, experts = 4, k = 2, hidden = 12;
  const Tensor x = test::rand_f32({tokens, dim}, 10), gate = test::rand_f32({experts, dim}, 11),
               w1 = test::rand_f32({experts, hidden, dim}, 12), w2 = test::rand_f32({experts, dim, hidden}, 13),
               w3 = test::rand_f32({experts, hidden, dim}, 14);
  for (double factor : {0.0, 0.5}) {
    expect_matches(
        [&](const std::vector<Tensor>& v) {
          nn::moe::CapacityTokenDispatcher dispatcher(factor);
          const ops::TopKExperts top = ops::topk_experts(ops::softmax(ops::linear(v[0], v[1]), -1), k);
          const Tensor weights = top.weights / ops::sum(top.weights, -1, true);
          const nn::moe::TokenDispatcher::Dispatched d = dispatcher.dispatch(v[0], top.ids, experts);
          const Tensor h = ops::grouped_swiglu(d.rows, v[2], v[4], d.rows_per_expert);
          const Tensor out = dispatcher.combine(ops::grouped_linear(h, v[3], d.rows_per_expert), weights, d);
          return std::vector<Tensor>{out, d.slots.dropped.to(kF32)};
        },
        {x, gate, w1, w2, w3}, kF32Tol, "capacity factor " + std::to_string(factor));
  }
}

// The sort into expert order: each pair's row, each row's token and the group sizes, with experts
// that nobody chose (groups of zero rows).
TEST(GraphMoE, SortByExpertMatchesTheKernel) {
  const int64_t tokens = 19, experts = 6, k = 2;
  std::vector<float> ids(static_cast<size_t>(tokens * k));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>((i * 7 + i / 3) % 4 + (i % 2) * 2);
  const Tensor id = Tensor::from_vector(ids, {tokens, k});
  expect_matches(
      [](const std::vector<Tensor>& v) {
        const ops::TokenPermutation p = ops::sort_by_expert(v[0].to(kI64), experts);
        EXPECT_EQ(p.tokens_per_expert.counts.defined(), v[0].is_lazy());
        const Tensor sizes = p.tokens_per_expert.counts.defined()
                                 ? p.tokens_per_expert.counts
                                 : Tensor::from_vector(p.tokens_per_expert.host, {experts});
        return std::vector<Tensor>{p.row_of.to(kF32), p.token_of_row.to(kF32), sizes.to(kF32)};
      },
      {id}, 0.0, "sort_by_expert", /*with_grads=*/false);
}

// The moves into expert order and back, forward and backward: eager's kernels as custom calls, and
// XLA's gathers where the program has no custom kernels.
TEST(GraphMoE, PermuteAndUnpermuteBothWays) {
  const int64_t tokens = 21, k = 3, experts = 5, d = 7;
  std::vector<int64_t> ids(static_cast<size_t>(tokens * k));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i / k * 3 + (i % k) * 2) % experts);
  const std::vector<Tensor> inputs{Tensor::from_vector(ids, {tokens, k}), test::rand_f32({tokens, d}, 30),
                                   test::rand_f32({tokens * k, d}, 31), test::rand_f32({tokens, k}, 32)};
  const Fn fn = [](const std::vector<Tensor>& v) {
    const ops::TokenPermutation p = ops::sort_by_expert(v[0], experts);
    return std::vector<Tensor>{ops::permute_tokens(v[1], p), ops::unpermute_tokens(v[2], v[3], p)};
  };
  for (bool calls : {true, false}) {
    const test::GraphEager r = test::run_eager_and_graph(fn, inputs, true, false, calls);
    EXPECT_EQ(r.module.find("titan_combine_rows_bwd") != std::string::npos, calls);
    ASSERT_EQ(r.graph.size(), 5u) << "two outputs, the gradients of x, rows and weights";
    for (size_t i = 0; i < r.eager.size(); ++i)
      EXPECT_TRUE(test::tensors_close(r.graph[i], r.eager[i], kF32Tol,
                                      std::string(calls ? "calls" : "gathers") + " #" + std::to_string(i)));
  }
}

// Group sizes that are data of the step go to titan's grouped kernels as custom calls (the linear
// map, and SwiGLU's fused first half): outputs and every gradient against eager, with an empty
// group, in float32 and under bf16 autocast; without custom kernels the program refuses them,
// saying what to use.
TEST(GraphMoE, GroupedProductsWithDataSizesRunTheKernelsAsCustomCalls) {
  const int64_t rows = 17, in = 12, out = 9, hidden = 10;
  const Tensor x = test::rand_f32({rows, in}, 20), w = test::rand_f32({4, out, in}, 21),
               w1 = test::rand_f32({4, hidden, in}, 22), w3 = test::rand_f32({4, hidden, in}, 23),
               sizes = Tensor::from_vector(std::vector<int64_t>{5, 0, 8, 4}, {4});
  const Fn fn = [](const std::vector<Tensor>& v) {
    const ops::GroupSizes groups(v[4]);
    return std::vector<Tensor>{ops::grouped_linear(v[0], v[1], groups), ops::grouped_swiglu(v[0], v[2], v[3], groups)};
  };
  expect_matches(fn, {x, w, w1, w3, sizes}, kF32Tol, "f32", true, /*custom_kernels=*/true);
  EXPECT_TITAN_ERROR(test::run_eager_and_graph(fn, {x, w, w1, w3, sizes}), "grouped_linear",
                     "data of the captured step", "compile.custom_kernels");
  TITAN_SKIP_WITHOUT_BF16();  // the eager side's kernels
  // Both sides round the same operands to bf16 and accumulate in float32 with one kernel.
  const AutocastGuard bf16(kBF16);
  expect_matches(fn, {x, w, w1, w3, sizes}, kF32Tol, "bf16 autocast", true, /*custom_kernels=*/true);
}

// The whole dropless layer as the local dispatcher runs it in a captured step: the sort, the
// grouped products as custom calls, the weighted combine; outputs and gradients against eager.
TEST(GraphMoE, DroplessLayerMatchesEager) {
  const int64_t tokens = 23, dim = 8, experts = 4, k = 2, hidden = 12;
  const Tensor x = test::rand_f32({tokens, dim}, 10), gate = test::rand_f32({experts, dim}, 11),
               w1 = test::rand_f32({experts, hidden, dim}, 12), w2 = test::rand_f32({experts, dim, hidden}, 13),
               w3 = test::rand_f32({experts, hidden, dim}, 14);
  expect_matches(
      [&](const std::vector<Tensor>& v) {
        nn::moe::LocalTokenDispatcher dispatcher;
        const ops::TopKExperts top = ops::topk_experts(ops::softmax(ops::linear(v[0], v[1]), -1), k);
        const Tensor weights = top.weights / ops::sum(top.weights, -1, true);
        const nn::moe::TokenDispatcher::Dispatched d = dispatcher.dispatch(v[0], top.ids, experts);
        const Tensor h = ops::grouped_swiglu(d.rows, v[2], v[4], d.rows_per_expert);
        return std::vector<Tensor>{dispatcher.combine(ops::grouped_linear(h, v[3], d.rows_per_expert), weights, d)};
      },
      {x, gate, w1, w2, w3}, kF32Tol, "dropless layer", true, /*custom_kernels=*/true);
}

}  // namespace
}  // namespace titan
