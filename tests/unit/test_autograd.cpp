#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_util.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/autograd/grad_mode.h"
#include "titan/ops/arith.h"
#include "titan/ops/cat.h"
#include "titan/ops/linalg.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using autograd::gradcheck;
using test::rand_f64;

TEST(Autograd, ChainAndFanOut) {
  // y = sum((a * b) + a): dy/da = b + 1, dy/db = a
  Tensor a = Tensor::from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor b = Tensor::from_vector<double>({4, 5, 6}, {3}).requires_grad_();
  Tensor y = ops::sum(a * b + a);
  y.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
  // a second graph accumulates into .grad
  ops::sum(a).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{6, 7, 8}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor a = rand_f64({3}, 1);
  {
    autograd::NoGradGuard g;
    Tensor y = a * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE((a * 2.0).requires_grad());
  EXPECT_TITAN_ERROR(a.fill_(1.0), "fill_", "requires grad", "NoGradGuard");
}

TEST(Autograd, Hooks) {
  Tensor a = rand_f64({4}, 2);
  Tensor mid;
  int post_calls = 0;
  a.register_hook([](const Tensor& g) { return g * 3.0; });
  a.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++post_calls;
    EXPECT_TRUE(p.grad().defined());
  });
  mid = a * 2.0;
  mid.register_hook([](const Tensor& g) { return g * 5.0; });
  ops::sum(mid).backward();
  EXPECT_EQ(post_calls, 1);
  for (double g : a.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 30.0);
}

// Data parallelism reduces a gradient from its post-accumulate hook while backward goes on: a
// leaf used only late in the forward must be accumulated before backward reaches the early ops.
// Inside activation checkpointing the leaves wait for the end instead (engine.cpp says why); the
// gradients are the same either way.
TEST(Autograd, LeavesAccumulateAsSoonAsCompleteUnlessAGraphIsRebuilt) {
  for (bool checkpointed : {false, true}) {
    Tensor early = rand_f64({4}, 11), late = rand_f64({4}, 12), x = rand_f64({4}, 13);
    std::vector<std::string> order;
    late.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("late accumulated"); });
    early.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("early accumulated"); });
    Tensor h = early * x;
    h.register_hook([&](const Tensor&) {
      order.push_back("backward reaches the early op");
      return Tensor();
    });
    auto tail = [late](const Tensor& in) { return ops::exp(in) * late; };
    ops::sum(checkpointed ? autograd::checkpoint(tail, h) : tail(h)).backward();
    auto at = [&](const std::string& event) { return std::find(order.begin(), order.end(), event) - order.begin(); };
    ASSERT_EQ(order.size(), 3u);
    EXPECT_EQ(at("late accumulated") < at("backward reaches the early op"), !checkpointed)
        << (checkpointed ? "checkpointed" : "plain");
    const std::vector<double> want = (ops::exp(early.detach() * x)).to_vector<double>();
    const std::vector<double> got = late.grad().to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]);
  }
}

TEST(Autograd, SecondBackwardWithoutRetainIsAnError) {
  Tensor a = rand_f64({3}, 3);
  Tensor y = ops::sum(ops::exp(a));
  y.backward();
  EXPECT_TITAN_ERROR(y.backward(), "second time", "retain_graph");
}

TEST(Autograd, GradOfLeafNotUsedIsZero) {
  Tensor a = rand_f64({3}, 4), b = rand_f64({2}, 5);
  auto g = autograd::grad({ops::sum(a)}, {Tensor::ones({}, {.dtype = kF64})}, {a, b});
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{0, 0}));
  EXPECT_FALSE(a.grad().defined());  // autograd::grad returns instead of accumulating
}

TEST(Autograd, GradcheckCatchesAWrongGradient) {
  Tensor a = rand_f64({5}, 6);
  // exp's gradient hooked to be wrong: gradcheck must fail
  auto res = gradcheck([](const std::vector<Tensor>& in) {
    Tensor x = in[0] * 1.0;
    if (x.requires_grad()) x.register_hook([](const Tensor& g) { return g * 1.01; });
    return std::vector<Tensor>{ops::exp(x)};
  }, {a});
  EXPECT_FALSE(res.ok);
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

void expect_gradcheck(const Fn& fn, const std::vector<Tensor>& in) {
  auto res = gradcheck(fn, in);
  EXPECT_TRUE(res.ok) << res.message;
}

class GradcheckShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(GradcheckShapes, ArithmeticAndViews) {
  int64_t n = GetParam();
  Tensor a = rand_f64({3, n}, 10), b = rand_f64({n}, 11), p = rand_f64({3, n}, 12, true, 0.5, 2.0);
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{v[0] + v[1]}; }, {a, b});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{v[0] - v[1]}; }, {a, b});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{v[0] * v[1]}; }, {a, b});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{v[0] / v[1]}; }, {b, p});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{-v[0], v[0] * 0.5, v[0] + 2.0}; }, {a});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::exp(v[0]), ops::square(v[0])}; }, {a});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::log(v[0]), ops::sqrt(v[0])}; }, {p});
  expect_gradcheck([](auto& v) {
    return std::vector<Tensor>{v[0].transpose(0, 1).contiguous(), v[0].reshape({-1}), v[0].narrow(1, 0, 1),
                               v[0].unsqueeze(1).expand({3, 2, v[0].size(1)}), v[0].permute({1, 0}) * 2.0};
  }, {a});
}

// split: views equal to narrow's, one backward joining the pieces' gradients, a piece left unused
// (its gradient zeros) included.
TEST_P(GradcheckShapes, Split) {
  const int64_t n = GetParam();
  const Tensor a = rand_f64({3, n + 3, 2}, 13);
  const std::vector<Tensor> pieces = ops::split(a, {1, n, 2}, 1);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].contiguous().to_vector<double>(), a.narrow(1, 1, n).contiguous().to_vector<double>());
  EXPECT_EQ(pieces[2].data_ptr(), a.narrow(1, n + 1, 2).data_ptr()) << "a piece is a view";
  expect_gradcheck([n](auto& v) {
    const std::vector<Tensor> p = ops::split(v[0], {1, n, 2}, -2);
    return std::vector<Tensor>{p[0] * 3.0, ops::exp(p[2])};
  }, {a});
  EXPECT_TITAN_ERROR(ops::split(a, {1, n}, 1), "split: sizes", "add up to", "not to dim 1");
  EXPECT_TITAN_ERROR(ops::split(a, {n + 4, -1}, 1), "negative size");
}

TEST_P(GradcheckShapes, Reductions) {
  int64_t n = GetParam();
  Tensor a = rand_f64({3, n, 2}, 20);
  for (int d = 0; d < 3; ++d) {
    expect_gradcheck([d](auto& v) { return std::vector<Tensor>{ops::sum(v[0], d), ops::mean(v[0], d, true)}; }, {a});
    expect_gradcheck([d](auto& v) { return std::vector<Tensor>{ops::max(v[0], d)}; }, {a});
    if (a.size(d) > 1) expect_gradcheck([d](auto& v) { return std::vector<Tensor>{ops::var(v[0], d)}; }, {a});
  }
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::sum(v[0]), ops::mean(v[0])}; }, {a});
}

TEST_P(GradcheckShapes, MatmulAndLinear) {
  int64_t n = GetParam();
  Tensor a = rand_f64({2, 3, n}, 30), b = rand_f64({n, 4}, 31), bb = rand_f64({2, n, 4}, 32);
  Tensor w = rand_f64({5, n}, 33), bias = rand_f64({5}, 34);
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::matmul(v[0], v[1])}; }, {a, b});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::matmul(v[0], v[1])}; }, {a, bb});
  expect_gradcheck([](auto& v) {
    return std::vector<Tensor>{ops::matmul(v[1].transpose(-1, -2), v[0].transpose(-1, -2))};
  }, {a, bb});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::linear(v[0], v[1], v[2])}; }, {a, w, bias});
  expect_gradcheck([](auto& v) { return std::vector<Tensor>{ops::linear(v[0], v[1])}; }, {a, w});
  // Column-major views of the input and the weight reach BLAS as transposes, in both gradients.
  Tensor xt = rand_f64({n, 3}, 35), wt = rand_f64({n, 5}, 36);
  expect_gradcheck([](auto& v) {
    return std::vector<Tensor>{ops::linear(v[0].transpose(0, 1), v[1].transpose(0, 1))};
  }, {xt, wt});
}

INSTANTIATE_TEST_SUITE_P(OddSizes, GradcheckShapes, ::testing::Values(1, 7, 129));

TEST(Ops, BadInputsNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 3}), d = Tensor::zeros({2, 3}, {.dtype = kF64});
  EXPECT_TITAN_ERROR(ops::add(a, b), "add", "[2, 3]", "[4, 3]");
  EXPECT_TITAN_ERROR(ops::mul(a, d), "mul", "f32[2, 3]", "f64[2, 3]");
  EXPECT_TITAN_ERROR(ops::matmul(a, a), "matmul", "f32[2, 3]");
  EXPECT_TITAN_ERROR(ops::linear(a, Tensor::zeros({5, 4})), "linear", "f32[2, 3]", "f32[5, 4]");
  EXPECT_TITAN_ERROR(ops::sum(a, 2), "sum", "dim 2");
  EXPECT_TITAN_ERROR(ops::add(Tensor::zeros({2}, {.dtype = kI64}), Tensor::zeros({2}, {.dtype = kI64})),
                     "add", "i64[2]");
}

}  // namespace
}  // namespace titan
