// Mixture-of-experts pieces: the routing kernels against plain references (ties included), the
// grouped GEMM against one linear per group, the MoE layer against the dense formulation (every
// expert on every token, zero-weighted where not chosen), gradchecks of every op and of the whole layer
// (router and auxiliary loss included), the auxiliary loss through activation checkpointing, the expert-bias
// update and the load statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/test_util.h"
#include "titan/nn/auxiliary_loss.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/gradcheck.h"
#include "titan/nn/moe/moe.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/moe.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using test::rand_f64;
using test::tensors_close;

// Expert ids [tokens, k] whose rows are distinct experts, drawn from `seed`.
Tensor random_routes(int64_t tokens, int64_t experts, int64_t k, uint64_t seed) {
  Generator gen(seed);
  Tensor scores = Tensor::rand({tokens, experts}, gen, {.dtype = kF64});
  return ops::topk_experts(scores, k).ids;
}

// ---- routing ------------------------------------------------------------------------------------

TEST(MoERouting, TopKMatchesAStableSortAndWeighsByTheUnbiasedScores) {
  const int64_t tokens = 37, experts = 11, k = 3;
  Tensor scores = rand_f64({tokens, experts}, 1, false), bias = rand_f64({experts}, 2, false, -0.2, 0.2);
  ops::TopKExperts top = ops::topk_experts(scores, k, bias);
  std::vector<double> s = scores.to_vector<double>(), b = bias.to_vector<double>();
  std::vector<int64_t> ids = top.ids.to_vector<int64_t>();
  std::vector<double> w = top.weights.to_vector<double>();
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return s[t * experts + x] + b[x] > s[t * experts + y] + b[y];
    });
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], order[j]) << "token " << t << " choice " << j;
      EXPECT_EQ(w[t * k + j], s[t * experts + order[j]]);
    }
  }
}

TEST(MoERouting, TiesGoToTheLowerExpertIndex) {
  // Experts 1, 2 and 3 tie for first; 0 and 4 tie below them.
  Tensor scores = Tensor::from_vector<float>({0.1f, 0.3f, 0.3f, 0.3f, 0.1f}, {1, 5});
  EXPECT_EQ(ops::topk_experts(scores, 2).ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ops::topk_experts(scores, 4).ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 0}));
  // A bias that lifts expert 4 into a tie with the leaders puts it after them, as its index says.
  Tensor bias = Tensor::from_vector<float>({0, 0, 0, 0, 0.2f}, {5});
  EXPECT_EQ(ops::topk_experts(scores, 4, bias).ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(ops::topk_experts(scores, 4, bias).weights.to_vector<float>(),
            (std::vector<float>{0.3f, 0.3f, 0.3f, 0.1f}));
}

TEST(MoERouting, SortByExpertGroupsPairsStably) {
  const int64_t tokens = 50, experts = 7, k = 3;
  Tensor ids = random_routes(tokens, experts, k, 3);
  ops::TokenPermutation p = ops::sort_by_expert(ids, experts);
  std::vector<int64_t> id = ids.to_vector<int64_t>(), row_of = p.row_of.to_vector<int64_t>(),
                       token_of_row = p.token_of_row.to_vector<int64_t>();
  std::vector<int64_t> expert_of_row(tokens * k, -1);
  for (int64_t pair = 0; pair < tokens * k; ++pair) {
    ASSERT_EQ(expert_of_row[row_of[pair]], -1) << "two pairs on row " << row_of[pair];
    expert_of_row[row_of[pair]] = id[pair];
    EXPECT_EQ(token_of_row[row_of[pair]], pair / k);
  }
  for (int64_t r = 1; r < tokens * k; ++r) {
    ASSERT_LE(expert_of_row[r - 1], expert_of_row[r]) << "row " << r;
    if (expert_of_row[r - 1] == expert_of_row[r]) {
      EXPECT_LT(token_of_row[r - 1], token_of_row[r]);
    }
  }
  for (int64_t e = 0; e < experts; ++e)
    EXPECT_EQ(p.tokens_per_expert.host[e], std::count(id.begin(), id.end(), e)) << "expert " << e;
}

// Slots fill in token order; the pairs past an expert's capacity are dropped and counted.
TEST(MoERouting, ExpertSlotsFillInTokenOrderAndDropThePairsPastCapacity) {
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 1, 0, 2, 0, 1, 1, 0}, {4, 2});
  const ops::ExpertSlots s = ops::expert_slots(ids, 3, 2);
  // Expert 0 gets tokens 0, 1, 2, 3 (room for 0 and 1), expert 1 tokens 0, 2, 3 (room for 0 and
  // 2), expert 2 token 1 and an empty slot.
  EXPECT_EQ(s.token_of_slot.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 2, 1, 0}));
  EXPECT_EQ(s.slot_of_pair.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 4, 0, 3, 0, 0}));
  EXPECT_EQ(s.pair_kept.to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(s.dropped.item(), 3.0);
  EXPECT_EQ(ops::expert_counts(ids, 3).to_vector<int64_t>(), (std::vector<int64_t>{4, 3, 1}));
  nn::moe::CapacityTokenDispatcher half(0.5), none(0.0);
  EXPECT_EQ(half.capacity(4, 2, 3), 2);  // ceil(0.5 * 8 / 3)
  EXPECT_EQ(none.capacity(4, 2, 3), 4);  // every token
  EXPECT_TITAN_ERROR(nn::moe::CapacityTokenDispatcher(-1.0), "capacity_factor", ">= 0");
}

TEST(MoERouting, ErrorsSayWhatToDo) {
  Tensor scores = rand_f64({4, 3}, 4, false);
  EXPECT_TITAN_ERROR(ops::topk_experts(scores, 4), "k = 4", "top_k <= num_experts");
  EXPECT_TITAN_ERROR(ops::topk_experts(scores, 2, Tensor::zeros({4}, {.dtype = kF64})), "bias must be [3]");
  Tensor ids = Tensor::from_vector<int64_t>({0, 5}, {1, 2});
  EXPECT_TITAN_ERROR(ops::sort_by_expert(ids, 3), "expert id", "5");
  EXPECT_TITAN_ERROR(ops::grouped_linear(rand_f64({5, 3}, 5, false), rand_f64({2, 4, 3}, 6, false), {2, 2}),
                     "summing to 4", "5 rows");
}

// ---- grouped GEMM -------------------------------------------------------------------------------

TEST(MoEGroupedLinear, MatchesOneLinearPerGroupForwardAndBackward) {
  // An empty group in the middle and a one-row group; f32 and f64.
  const std::vector<int64_t> groups = {5, 0, 1, 9};
  for (DType dt : {kF64, kF32}) {
    Tensor x = rand_f64({15, 6}, 7, false).to(dt).requires_grad_();
    Tensor w = rand_f64({4, 3, 6}, 8, false).to(dt).requires_grad_();
    Tensor cot = rand_f64({15, 3}, 9, false).to(dt);
    Tensor y = ops::grouped_linear(x, w, groups);
    std::vector<Tensor> grads = autograd::grad({y}, {cot}, {x, w});

    Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
    std::vector<Tensor> parts;
    int64_t row = 0;
    for (int64_t g = 0; g < 4; ++g) {
      if (groups[g] > 0)
        parts.push_back(ops::linear(xr.narrow(0, row, groups[g]), wr.narrow(0, g, 1).squeeze(0)));
      row += groups[g];
    }
    Tensor ref = Tensor::empty({15, 3}, {.dtype = dt});
    {
      row = 0;
      for (const Tensor& p : parts) {
        ref.narrow(0, row, p.size(0)).copy_(p.detach());
        row += p.size(0);
      }
    }
    const double tol = dt == kF64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(tensors_close(y, ref, tol, "grouped_linear forward"));
    Tensor loss_ref;
    row = 0;
    for (const Tensor& p : parts) {
      Tensor term = ops::sum(p * cot.narrow(0, row, p.size(0)));
      loss_ref = loss_ref.defined() ? loss_ref + term : term;
      row += p.size(0);
    }
    std::vector<Tensor> ref_grads = autograd::grad({loss_ref}, {Tensor::ones({}, {.dtype = dt})}, {xr, wr});
    EXPECT_TRUE(tensors_close(grads[0], ref_grads[0], tol, "d x"));
    EXPECT_TRUE(tensors_close(grads[1], ref_grads[1], tol, "d weight"));
    // The empty group's weight gets an exact zero gradient.
    EXPECT_EQ(ops::sum(ops::square(grads[1].narrow(0, 1, 1))).item(), 0.0);
  }
}

TEST(MoEGradcheck, GroupedLinear) {
  Tensor x = rand_f64({7, 4}, 10), w = rand_f64({3, 5, 4}, 11);
  auto res = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::grouped_linear(in[0], in[1], {3, 0, 4})};
      },
      {x, w});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(MoEGroupedSwiGLU, MatchesTheCompositionItFuses) {
  // x's gradient comes from two GEMMs, the second accumulating onto the first; an empty group
  // in the middle and a one-row group; f32 and f64.
  const std::vector<int64_t> groups = {5, 0, 1, 9};
  for (DType dt : {kF64, kF32}) {
    Tensor x = rand_f64({15, 6}, 20, false).to(dt).requires_grad_();
    Tensor w1 = rand_f64({4, 3, 6}, 21, false).to(dt).requires_grad_();
    Tensor w3 = rand_f64({4, 3, 6}, 22, false).to(dt).requires_grad_();
    Tensor cot = rand_f64({15, 3}, 23, false).to(dt);
    Tensor y = ops::grouped_swiglu(x, w1, w3, groups);
    std::vector<Tensor> grads = autograd::grad({y}, {cot}, {x, w1, w3});
    Tensor ref = ops::swiglu(ops::grouped_linear(x, w1, groups), ops::grouped_linear(x, w3, groups));
    std::vector<Tensor> ref_grads = autograd::grad({ref}, {cot}, {x, w1, w3});
    const double tol = dt == kF64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(tensors_close(y, ref, tol, "grouped_swiglu forward"));
    EXPECT_TRUE(tensors_close(grads[0], ref_grads[0], tol, "d x"));
    EXPECT_TRUE(tensors_close(grads[1], ref_grads[1], tol, "d w1"));
    EXPECT_TRUE(tensors_close(grads[2], ref_grads[2], tol, "d w3"));
  }
  EXPECT_TITAN_ERROR(ops::grouped_swiglu(rand_f64({5, 3}, 5, false), rand_f64({2, 4, 3}, 6, false),
                                         rand_f64({2, 5, 3}, 7, false), {2, 3}),
                     "w1", "w3", "same shape");
  EXPECT_TITAN_ERROR(ops::grouped_swiglu(rand_f64({5, 3}, 5, false), rand_f64({2, 4, 3}, 6, false),
                                         rand_f64({2, 4, 3}, 7, false), {2, 2}),
                     "grouped_swiglu", "summing to 4", "5 rows");
}

TEST(MoEGradcheck, GroupedSwiGLU) {
  Tensor x = rand_f64({7, 4}, 24), w1 = rand_f64({3, 5, 4}, 25), w3 = rand_f64({3, 5, 4}, 26);
  auto res = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::grouped_swiglu(in[0], in[1], in[2], {3, 0, 4})};
      },
      {x, w1, w3});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(MoEGradcheck, PermuteRows) {
  Tensor x = rand_f64({5, 3}, 30);
  const Tensor order = Tensor::from_vector<int64_t>({3, 0, 4, 1, 2}, {5});
  Tensor y = ops::permute_rows(x.detach(), order);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(y.narrow(0, i, 1).to_vector<double>(),
              x.narrow(0, order.to_vector<int64_t>()[i], 1).to_vector<double>());
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::permute_rows(in[0], order)}; },
      {x});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(MoEGradcheck, PermuteUnpermuteAndTopKWeights) {
  const int64_t tokens = 6, experts = 4, k = 2, d = 3;
  ops::TokenPermutation p = ops::sort_by_expert(random_routes(tokens, experts, k, 12), experts);
  Tensor x = rand_f64({tokens, d}, 13), rows = rand_f64({tokens * k, d}, 14), w = rand_f64({tokens, k}, 15);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::permute_tokens(in[0], p), ops::unpermute_tokens(in[1], in[2], p)};
      },
      {x, rows, w});
  EXPECT_TRUE(res.ok) << res.message;
  // Scores well apart, so the finite differences never change the choice.
  Tensor scores =
      Tensor::from_vector<double>({0.1, 0.5, 0.9, 0.3, 0.8, 0.2, 0.6, 0.4}, {2, 4}).requires_grad_();
  res = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::topk_experts(in[0], 2).weights}; },
      {scores});
  EXPECT_TRUE(res.ok) << res.message;
}

// ---- the layer ----------------------------------------------------------------------------------

constexpr int64_t kDim = 6, kExperts = 4, kTopK = 2, kHidden = 5;

std::shared_ptr<nn::moe::MoE> small_moe(bool bias = false, bool norm_topk_prob = true) {
  auto moe = std::make_shared<nn::moe::MoE>(0, kDim,
                                            nn::moe::MoEArgs{.num_experts = kExperts,
                                                             .top_k = kTopK,
                                                             .hidden_dim = kHidden,
                                                             .norm_topk_prob = norm_topk_prob,
                                                             .load_balance_bias = bias,
                                                             .bias_update_rate = 0.1},
                                            0.3, TensorOptions{.dtype = kF64});
  Generator gen(21);
  moe->init_weights(gen);
  // Larger than the init's, so every path carries a gradient well above the finite differences' noise.
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : moe->named_parameters())
    Tensor(p).copy_(Tensor::randn(p.sizes(), gen, {.dtype = kF64}, 0, 0.5));
  return moe;
}

std::shared_ptr<nn::moe::MoEPass> pass_with(double aux_weight) {
  auto pass = std::make_shared<nn::moe::MoEPass>();
  pass->aux_loss_weight = aux_weight;
  return pass;
}

// The dense formulation, for reference only: every expert on every token, weighted by a
// [tokens, experts] routing matrix that is zero off each token's chosen experts.
Tensor dense_reference(nn::moe::MoE& moe, const Tensor& x, bool norm_topk_prob) {
  Tensor tokens = x.reshape({-1, kDim});
  const int64_t n = tokens.size(0);
  Tensor scores = ops::softmax(ops::linear(tokens, moe.router->gate->weight), -1);
  ops::TopKExperts top = ops::topk_experts(scores, kTopK);
  Tensor w = norm_topk_prob ? top.weights / ops::sum(top.weights, -1, true) : top.weights;
  std::vector<int64_t> ids = top.ids.to_vector<int64_t>();
  Tensor routing;
  for (int64_t j = 0; j < kTopK; ++j) {
    Tensor one_hot = Tensor::zeros({n, kExperts}, {.dtype = kF64});
    for (int64_t t = 0; t < n; ++t) one_hot.narrow(0, t, 1).narrow(1, ids[t * kTopK + j], 1).fill_(1.0);
    Tensor term = one_hot * w.narrow(1, j, 1);
    routing = routing.defined() ? routing + term : term;
  }
  Tensor out;
  for (int64_t e = 0; e < kExperts; ++e) {
    auto expert = [&](const Tensor& weight) { return weight.narrow(0, e, 1).squeeze(0); };
    Tensor y = ops::linear(ops::swiglu(ops::linear(tokens, expert(moe.experts->w1)),
                                       ops::linear(tokens, expert(moe.experts->w3))),
                           expert(moe.experts->w2));
    Tensor term = y * routing.narrow(1, e, 1);
    out = out.defined() ? out + term : term;
  }
  return out.view(x.sizes());
}

TEST(MoELayer, MatchesTheDenseFormulation) {
  for (bool norm : {true, false}) {
    auto moe = small_moe(false, norm);
    Tensor x = rand_f64({2, 5, kDim}, 22);
    Tensor y = (*moe)(x, pass_with(0));
    Tensor ref = dense_reference(*moe, x, norm);
    EXPECT_TRUE(tensors_close(y, ref, 1e-12, "MoE output")) << "norm_topk_prob " << norm;
    Tensor cot = rand_f64({2, 5, kDim}, 23, false);
    std::vector<Tensor> leaves = {x, moe->router->gate->weight, moe->experts->w1, moe->experts->w2,
                                  moe->experts->w3};
    std::vector<Tensor> g = autograd::grad({y}, {cot}, leaves);
    std::vector<Tensor> gr = autograd::grad({ref}, {cot}, leaves);
    for (size_t i = 0; i < leaves.size(); ++i)
      EXPECT_TRUE(tensors_close(g[i], gr[i], 1e-12, "gradient " + std::to_string(i)));
  }
}

// With room for every token, the capacity dispatcher (graph mode's) computes the dropless layer.
TEST(MoELayer, CapacityDispatcherWithRoomForEveryTokenMatchesTheDenseFormulation) {
  auto moe = small_moe(false, true);
  moe->dispatcher = std::make_shared<nn::moe::CapacityTokenDispatcher>(0.0);
  Tensor x = rand_f64({2, 5, kDim}, 22);
  Tensor y = (*moe)(x, pass_with(0));
  Tensor ref = dense_reference(*moe, x, true);
  EXPECT_TRUE(tensors_close(y, ref, 1e-12, "MoE output"));
  Tensor cot = rand_f64({2, 5, kDim}, 23, false);
  std::vector<Tensor> leaves = {x, moe->router->gate->weight, moe->experts->w1, moe->experts->w2, moe->experts->w3};
  std::vector<Tensor> g = autograd::grad({y}, {cot}, leaves);
  std::vector<Tensor> gr = autograd::grad({ref}, {cot}, leaves);
  for (size_t i = 0; i < leaves.size(); ++i)
    EXPECT_TRUE(tensors_close(g[i], gr[i], 1e-12, "gradient " + std::to_string(i)));
}

TEST(MoEGradcheck, WholeLayerWithRouterAndAuxiliaryLoss) {
  auto moe = small_moe();
  Tensor x = rand_f64({2, 3, kDim}, 24);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto pass = pass_with(0.7);
        Tensor y = (*moe)(in[0], pass);
        return std::vector<Tensor>{y, pass->aux_losses.total()};
      },
      {x, moe->router->gate->weight, moe->experts->w1, moe->experts->w2, moe->experts->w3});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(MoELayer, AuxiliaryLossIsTheSwitchLossAndOneWhenBalanced) {
  // A zero gate scores every expert 1/E: P_e = 1/E whatever the choice, so E * sum f_e P_e = 1.
  auto moe = small_moe();
  {
    autograd::NoGradGuard no_grad;
    moe->router->gate->weight.zero_();
  }
  auto pass = pass_with(1.0);
  (*moe)(rand_f64({4, kDim}, 25, false), pass);
  EXPECT_NEAR(pass->aux_losses.total().item(), 1.0, 1e-12);
}

TEST(MoELayer, CheckpointedLayerGivesTheSameGradientsAuxiliaryLossIncluded) {
  auto moe = small_moe();
  Tensor x = rand_f64({2, 4, kDim}, 26);
  Tensor cot = rand_f64({2, 4, kDim}, 27, false);
  std::vector<Tensor> leaves = {x, moe->router->gate->weight, moe->experts->w1};
  std::vector<std::vector<Tensor>> grads;
  for (bool checkpointed : {false, true}) {
    auto pass = pass_with(0.5);
    auto body = [&, pass](const Tensor& in) { return (*moe)(in, pass); };
    Tensor y = checkpointed ? autograd::checkpoint(body, x) : body(x);
    Tensor loss = ops::sum(y * cot) + pass->aux_losses.total();
    grads.push_back(autograd::grad({loss}, {Tensor::ones({}, {.dtype = kF64})}, leaves));
    // The re-run in backward counted no tokens of its own.
    std::vector<int64_t> counts = moe->end_step();
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 8 * kTopK) << checkpointed;
  }
  for (size_t i = 0; i < leaves.size(); ++i)
    EXPECT_TRUE(tensors_close(grads[1][i], grads[0][i], 0, "leaf " + std::to_string(i)));
  // Without the auxiliary loss in the objective, the router's gradient differs: the loss does
  // reach it through the checkpointed graph.
  auto pass = pass_with(0.5);
  Tensor y = autograd::checkpoint([&, pass](const Tensor& in) { return (*moe)(in, pass); }, x);
  Tensor gate_grad = autograd::grad({ops::sum(y * cot)}, {Tensor::ones({}, {.dtype = kF64})}, {leaves[1]})[0];
  EXPECT_GT(test::max_rel_error(gate_grad, grads[0][1]), 1e-6);
}

TEST(MoELayer, ExpertBiasMovesTowardsAnEvenLoadAndStaysCentred) {
  auto moe = small_moe(/*bias=*/true);
  moe->train();
  (*moe)(rand_f64({16, kDim}, 28, false), pass_with(0));
  std::vector<int64_t> counts = moe->end_step();
  std::vector<double> bias = moe->router->expert_bias.to_vector<double>();
  const double mean = static_cast<double>(16 * kTopK) / kExperts;
  double sum = 0;
  for (int64_t e = 0; e < kExperts; ++e) {
    sum += bias[e];
    if (static_cast<double>(counts[e]) < mean) {
      EXPECT_GT(bias[e], 0) << "expert " << e;
    } else if (static_cast<double>(counts[e]) > mean) {
      EXPECT_LT(bias[e], 0) << "expert " << e;
    }
  }
  EXPECT_NEAR(sum, 0, 1e-12);
  // The counts started afresh; eval-mode forwards add none.
  moe->eval();
  (*moe)(rand_f64({16, kDim}, 29, false), pass_with(0));
  std::vector<int64_t> none = moe->end_step();
  EXPECT_EQ(std::accumulate(none.begin(), none.end(), int64_t{0}), 0);
}

TEST(MoELoad, MinMaxAndMeanCoefficientOfVariation) {
  nn::moe::ExpertLoad load = nn::moe::expert_load({{2, 2, 2, 2}, {1, 3, 5, 3}});
  EXPECT_EQ(load.min, 1);
  EXPECT_EQ(load.max, 5);
  // Layer 0 is even (0); layer 1 has mean 3 and std sqrt(2): cv sqrt(2) / 3; the mean of both.
  EXPECT_NEAR(load.cv, std::sqrt(2.0) / 3 / 2, 1e-12);
}

// ---- auxiliary losses -----------------------------------------------------------------------------

TEST(AuxiliaryLosses, TermsCountOnceByKeyAndReceiveTheirWeightedGradient) {
  nn::AuxiliaryLosses losses;
  Tensor a = rand_f64({3}, 30), out_in = rand_f64({2}, 31);
  Tensor term = ops::sum(ops::square(a));
  Tensor out = losses.attach(out_in, term, 0.5, 7);
  // A re-run (checkpointing, a layer loop's backward) neither adds nor replaces the term counted.
  losses.attach(out_in, ops::scale(term, 2.0), 0.5, 7);
  Tensor total = losses.total();
  EXPECT_NEAR(total.item(), 0.5 * term.item(), 1e-15);
  // d/da of (3 * total + sum(out)) = 3 * 0.5 * 2a, and out passes its gradient through.
  std::vector<Tensor> g =
      autograd::grad({ops::sum(out) + total * 3.0}, {Tensor::ones({}, {.dtype = kF64})}, {a, out_in});
  EXPECT_TRUE(tensors_close(g[0], a.detach() * 3.0, 1e-15, "term's gradient"));
  EXPECT_TRUE(tensors_close(g[1], Tensor::ones({2}, {.dtype = kF64}), 0, "out's gradient"));
}

// A layer loop takes the term its body attached and counts each layer's under the layer's key.
TEST(AuxiliaryLosses, ATakenTermCountsAgainUnderItsLayersKeys) {
  nn::AuxiliaryLosses losses;
  const Tensor term = ops::sum(ops::square(rand_f64({3}, 32)));
  losses.attach(rand_f64({2}, 33), term, 0.5, 0);
  const Tensor taken = losses.take(0);
  EXPECT_EQ(taken.item(), term.item());
  EXPECT_EQ(losses.total().item(), 0.0) << "a taken term no longer counts";
  const auto half = [](const Tensor& x) { return ops::scale(x, 0.5); };
  losses.count(taken, half, 0);
  losses.count(ops::scale(taken, 3.0), half, 1);
  EXPECT_NEAR(losses.total().item(), 0.5 * 4.0 * term.item(), 1e-12);
  EXPECT_TITAN_ERROR(losses.take(2), "no term under key 2");
}

}  // namespace
}  // namespace titan
