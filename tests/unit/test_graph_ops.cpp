// The lowerings of the pointwise, norm, RoPE, embedding, loss and softmax ops against their eager
// kernels: outputs and input gradients, on shapes with odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/cat.h"
#include "titan/ops/embedding.h"
#include "titan/ops/loss.h"
#include "titan/ops/norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using test::run_eager_and_graph;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// f32 graphs differ from the kernels by summation order and by XLA's own exp/log/erfc.
constexpr double kF32Tol = 1e-5;

void expect_matches(const Fn& fn, const std::vector<Tensor>& inputs, double tol, const std::string& what) {
  const test::GraphEager r = run_eager_and_graph(fn, inputs);
  ASSERT_EQ(r.eager.size(), r.graph.size()) << what;
  for (size_t i = 0; i < r.eager.size(); ++i)
    EXPECT_TRUE(test::tensors_close(r.graph[i], r.eager[i], tol, what + " #" + std::to_string(i)));
}

Tensor ints(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

TEST(GraphOps, RmsNormAndLayerNorm) {
  // d > 2: with d = 1 or 2 layer_norm's output is 0 or +-1 whatever x, so dx is 0 but for rounding
  // noise, which the two sides leave differently.
  for (const Shape& s : std::vector<Shape>{{3, 7}, {2, 5, 33}, {1, 3}}) {
    const int64_t d = s.back();
    const Tensor x = test::rand_f32(s, 1, -3, 3), w = test::rand_f32({d}, 2), b = test::rand_f32({d}, 3);
    const std::string at = " at " + shape_str(s);
    expect_matches([](const auto& v) { return std::vector<Tensor>{ops::rms_norm(v[0], v[1], 1e-6)}; }, {x, w},
                   kF32Tol, "rms_norm" + at);
    expect_matches([](const auto& v) { return std::vector<Tensor>{ops::rms_norm(v[0], Tensor(), 1e-5)}; },
                   {x}, kF32Tol, "rms_norm without weight" + at);
    expect_matches([](const auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], v[1], v[2], 1e-5)}; },
                   {x, w, b}, kF32Tol, "layer_norm" + at);
    expect_matches(
        [](const auto& v) { return std::vector<Tensor>{ops::layer_norm(v[0], Tensor(), Tensor(), 1e-5)}; },
        {x}, kF32Tol, "layer_norm without parameters" + at);
  }
  // Far from zero: the centred variance must not cancel. Both sides store the mean in f32, whose
  // rounding (|mean| * 6e-8 = 6e-5 against a std of 0.6) bounds the agreement; in f64 it is exact.
  const Fn centred = [](const auto& v) {
    return std::vector<Tensor>{ops::layer_norm(v[0], Tensor(), Tensor(), 1e-5)};
  };
  const Tensor shifted = ops::add_scalar(test::rand_f32({4, 9}, 4), 1000.0);
  expect_matches(centred, {shifted}, 2e-4, "layer_norm of x near 1000");
  expect_matches(centred, {shifted.to(kF64)}, 1e-12, "layer_norm of x near 1000 in f64");
}

TEST(GraphOps, Activations) {
  const Tensor x = test::rand_f32({5, 37}, 5, -6, 6);
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::sigmoid(v[0])}; }, {x}, kF32Tol,
                 "sigmoid");
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::silu(v[0])}; }, {x}, kF32Tol, "silu");
  expect_matches(
      [](const auto& v) { return std::vector<Tensor>{ops::gelu(v[0], ops::GeluApproximation::none)}; }, {x},
      kF32Tol, "gelu");
  expect_matches(
      [](const auto& v) { return std::vector<Tensor>{ops::gelu(v[0], ops::GeluApproximation::tanh)}; }, {x},
      kF32Tol, "gelu(tanh)");
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::tanh(v[0])}; }, {x}, kF32Tol, "tanh");
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::softcap(v[0], 3.0)}; }, {x}, kF32Tol,
                 "softcap");
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::clamp(v[0], -2.5, 4.0)}; }, {x}, kF32Tol,
                 "clamp");
  const Tensor up = test::rand_f32({5, 37}, 6, -2, 2);
  expect_matches([](const auto& v) { return std::vector<Tensor>{ops::swiglu(v[0], v[1])}; }, {x, up}, kF32Tol,
                 "swiglu");
}

TEST(GraphOps, GeluKeepsRelativeAccuracyInTheNegativeTail) {
  // 1 + erf(x / sqrt 2) would cancel here; erfc does not.
  const Tensor x = Tensor::from_vector(std::vector<float>{-9, -7.5, -6, -4}, {4});
  expect_matches(
      [](const auto& v) { return std::vector<Tensor>{ops::gelu(v[0], ops::GeluApproximation::none)}; }, {x},
      1e-4, "gelu tail");
}

TEST(GraphOps, SoftmaxAndLogSoftmaxOnEveryDim) {
  const Tensor x = test::rand_f32({3, 11, 2}, 7, -4, 4);
  for (int64_t d : {0, 1, 2, -1}) {
    const std::string at = " dim " + std::to_string(d);
    expect_matches([d](const auto& v) { return std::vector<Tensor>{ops::softmax(v[0], d)}; }, {x}, kF32Tol,
                   "softmax" + at);
    expect_matches([d](const auto& v) { return std::vector<Tensor>{ops::log_softmax(v[0], d)}; }, {x},
                   kF32Tol, "log_softmax" + at);
  }
}

TEST(GraphOps, RopeBothLayoutsAndAnOffset) {
  const ops::RopeTable table = ops::RopeTable::build(10, 40, 10000.0);
  const Tensor x = test::rand_f32({2, 7, 3, 10}, 8);
  for (ops::RopeLayout layout : {ops::RopeLayout::rotate_half, ops::RopeLayout::interleaved}) {
    for (int64_t start : {0, 13}) {
      const std::string what =
          std::string(layout == ops::RopeLayout::interleaved ? "interleaved" : "rotate_half") + " from " +
          std::to_string(start);
      expect_matches(
          [&](const auto& v) { return std::vector<Tensor>{ops::rope(v[0], table, layout, start)}; }, {x},
          kF32Tol, "rope " + what);
    }
  }
}

// The first 6 of 10 dims rotate, with YaRN's attention factor in the table (cos^2 + sin^2 != 1):
// the backward is the forward's transpose, the last 4 dims and their gradient pass through.
TEST(GraphOps, RopePartialRotaryWithAnAttentionFactor) {
  const ops::RopeSpec spec{.head_dim = 10,
                           .rotary_dim = 6,
                           .theta = 10000.0,
                           .scaling = ops::RopeYarn{.factor = 4.0, .original_max_position = 16}};
  const ops::RopeTable table = ops::RopeTable::build(spec, 40);
  const Tensor x = test::rand_f32({2, 7, 3, 10}, 18);
  for (ops::RopeLayout layout : {ops::RopeLayout::rotate_half, ops::RopeLayout::interleaved}) {
    for (int64_t start : {0, 30}) {
      const std::string what =
          std::string(layout == ops::RopeLayout::interleaved ? "interleaved" : "rotate_half") + " from " +
          std::to_string(start);
      expect_matches(
          [&](const auto& v) { return std::vector<Tensor>{ops::rope(v[0], table, layout, start)}; }, {x},
          kF32Tol, "partial rope " + what);
      // The start as a value of the program (graph mode's decoding step).
      const test::GraphEager r = test::run_eager_and_graph(
          [&](const std::vector<Tensor>& v) {
            return std::vector<Tensor>{ops::rope(v[0], table, layout, v[1])};
          },
          {x, Tensor::scalar<int64_t>(start)}, false);
      EXPECT_LE(test::max_relative_error(r.graph[0], r.eager[0]), kF32Tol) << "program start " << what;
      EXPECT_TRUE(
          test::tensors_close(r.eager[0], ops::rope(x, table, layout, start), 0, "host start " + what));
    }
  }
}

TEST(GraphOps, CatAlongEachDim) {
  const Tensor a = test::rand_f32({2, 3, 4}, 1), b = test::rand_f32({2, 1, 4}, 2),
               c = test::rand_f32({2, 3, 5}, 3);
  expect_matches(
      [](const auto& v) {
        return std::vector<Tensor>{ops::cat({v[0], v[1]}, 1)};
      },
      {a, b}, 0, "cat dim 1");
  expect_matches(
      [](const auto& v) {
        return std::vector<Tensor>{ops::cat({v[0], v[1]}, -1)};
      },
      {a, c}, 0, "cat dim -1");
}

// split's backward is one concatenate of the pieces' gradients; a piece unused gets zeros.
TEST(GraphOps, SplitJoinsThePiecesGradients) {
  const Tensor a = test::rand_f32({2, 9, 4}, 4);
  expect_matches(
      [](const auto& v) {
        const std::vector<Tensor> p = ops::split(v[0], {2, 3, 4}, 1);
        return std::vector<Tensor>{p[0] * 2.0, ops::exp(p[2])};
      },
      {a}, kF32Tol, "split dim 1");
}

TEST(GraphOps, EmbeddingWithRepeatedIds) {
  const Tensor w = test::rand_f32({11, 6}, 9);
  for (DType dt : {kI64, kI32}) {
    // Id 3 three times: its row's gradient is the sum.
    const Tensor ids = ints({3, 0, 10, 3, 7, 3}, {2, 3}, dt);
    expect_matches([](const auto& v) { return std::vector<Tensor>{ops::embedding(v[1], v[0])}; }, {w, ids},
                   kF32Tol, "embedding ids " + std::string(dtype_name(dt)));
  }
}

TEST(GraphOps, CrossEntropyReductionsAndIgnoredRows) {
  const Tensor logits = test::rand_f32({2, 5, 13}, 10, -5, 5);
  for (DType dt : {kI64, kI32}) {
    const Tensor t = ints({0, 12, -100, 4, 4, 7, -100, 1, 12, 2}, {2, 5}, dt);
    for (ops::Reduction red : {ops::Reduction::mean, ops::Reduction::sum}) {
      const std::string what = std::string("cross_entropy ") + (red == ops::Reduction::sum ? "sum" : "mean") +
                               " targets " + std::string(dtype_name(dt));
      expect_matches(
          [red](const auto& v) { return std::vector<Tensor>{ops::cross_entropy(v[0], v[1], -100, red)}; },
          {logits, t}, kF32Tol, what);
    }
  }
}

TEST(GraphOps, CrossEntropyWithEveryRowIgnoredIsNanWithZeroGradient) {
  const Tensor logits = test::rand_f32({3, 4}, 11);
  const Tensor t = ints({-1, -1, -1}, {3}, kI64);
  const test::GraphEager r = run_eager_and_graph(
      [](const auto& v) { return std::vector<Tensor>{ops::cross_entropy(v[0], v[1], -1)}; }, {logits, t});
  ASSERT_EQ(r.graph.size(), 2u);
  EXPECT_TRUE(std::isnan(r.eager[0].item()));
  EXPECT_TRUE(std::isnan(r.graph[0].item()));
  EXPECT_TRUE(test::tensors_close(r.graph[1], r.eager[1], 0.0, "gradient"));
}

}  // namespace
}  // namespace titan
