// The fused inference forward of attention with an additive bias (attention/dense_forward.h)
// against the same attention as ops in float64, and under bf16 autocast against the ops under
// autocast, for every bias the text encoders pass: none, T5's per-head table (read through a
// permuted view), CLIP's causal and padding masks, and their sum; with a query block split across
// tasks, and the same bits on 1 and 2 threads. models::common::dense_attention picks it only
// without gradients.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "support/test_util.h"
#include "titan/attention/dense_forward.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/models/common/dense_attention.h"
#include "titan/ops/arith.h"

namespace titan {
namespace {

using models::common::attention_bias;
using models::common::dense_attention;

struct Case {
  std::string name;
  int64_t B, S, H, D;
  double scale;
  // [S, S, H] permuted to [1, H, S, S] (T5's table); a causal and padding mask [B, 1, S, S];
  // a padding mask alone [B, 1, 1, S].
  bool head_table, causal, padding;
};

Tensor bias_of(const Case& c, DType dtype) {
  Tensor bias;
  if (c.head_table)
    bias = test::rand_f64({c.S, c.S, c.H}, 7, false, -3, 3).to(dtype).permute({2, 0, 1}).unsqueeze(0);
  if (c.causal || c.padding) {
    std::vector<int64_t> keep(static_cast<size_t>(c.B * c.S), 1);
    for (int64_t j = c.S - 3; j < c.S; ++j) keep[j] = 0;  // the first row's last 3 tokens are padding
    const Tensor mask = attention_bias(Tensor::from_vector<int64_t>(keep, {c.B, c.S}), c.S, c.causal, dtype);
    bias = bias.defined() ? bias + mask : mask;
  }
  return bias;
}

// The fused kernel's output, called directly on `threads` threads.
Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& bias, bool bf16,
             int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2) * q.size(3)});
  attention::dense_attention_forward(q, k, v, scale, bias, bf16, out);
  omp_set_num_threads(before);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"plain", 2, 16, 2, 8, 0.25, false, false, false},
      {"t5 table, scale 1", 2, 33, 3, 16, 1.0, true, false, false},
      {"clip causal + padding", 2, 77, 2, 16, 0.25, false, true, false},
      {"padding only", 3, 20, 2, 8, 0.5, false, false, true},
      {"t5 table + padding", 2, 24, 2, 8, 1.0, true, false, true},
      // 64k scores per task: 218 query rows, so a head's 300 rows are two tasks, the second partial.
      {"query rows in two tasks", 1, 300, 2, 16, 0.25, false, true, false},
  };
  return all;
}

TEST(DenseAttentionForward, MatchesTheOpsInFloat64) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor q = test::rand_f64({c.B, c.S, c.H, c.D}, 1, false), k = test::rand_f64({c.B, c.S, c.H, c.D}, 2, false),
                 v = test::rand_f64({c.B, c.S, c.H, c.D}, 3, false);
    const Tensor ref = dense_attention(q, k, v, c.scale, bias_of(c, kF64));
    const Tensor bias = bias_of(c, kF32);
    const Tensor one = fused(q.to(kF32), k.to(kF32), v.to(kF32), c.scale, bias, false, 1);
    EXPECT_TRUE(test::tensors_close(one.to(kF64), ref, 1e-5, c.name));
    const Tensor two = fused(q.to(kF32), k.to(kF32), v.to(kF32), c.scale, bias, false, 2);
    EXPECT_TRUE(test::tensors_close(two, one, 0.0, c.name + ", 2 threads against 1"));
  }
}

// Under autocast both sides multiply the same bf16 roundings of q, k and v; the probabilities
// round the same unless a sum's order moves one across a rounding boundary.
TEST(DenseAttentionForward, Bf16ProductsMatchTheOpsUnderAutocast) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor q = test::rand_f32({c.B, c.S, c.H, c.D}, 1), k = test::rand_f32({c.B, c.S, c.H, c.D}, 2),
                 v = test::rand_f32({c.B, c.S, c.H, c.D}, 3);
    const Tensor bias = bias_of(c, kF32);
    Tensor ref;
    {
      const AutocastGuard bf16(kBF16);
      // q requiring grad keeps dense_attention on its ops.
      ref = dense_attention(q.detach().requires_grad_(true), k, v, c.scale, bias).detach();
    }
    const Tensor one = fused(q, k, v, c.scale, bias, true, 1);
    EXPECT_TRUE(test::tensors_close(one, ref, 2e-3, c.name));
    EXPECT_TRUE(test::tensors_close(fused(q, k, v, c.scale, bias, true, 2), one, 0.0, c.name + ", 2 threads"));
  }
}

// Without gradients dense_attention runs the kernel (the same bits), with them the ops.
TEST(DenseAttentionForward, DenseAttentionTakesItWithoutGradients) {
  const Case& c = cases()[1];
  const Tensor q = test::rand_f32({c.B, c.S, c.H, c.D}, 1), k = test::rand_f32({c.B, c.S, c.H, c.D}, 2),
               v = test::rand_f32({c.B, c.S, c.H, c.D}, 3);
  const Tensor bias = bias_of(c, kF32);
  const autograd::NoGradGuard no_grad;
  for (const bool bf16 : {false, true}) {
    const AutocastGuard precision(bf16 ? kBF16 : kF32);
    EXPECT_TRUE(test::tensors_close(dense_attention(q, k, v, c.scale, bias),
                                    fused(q, k, v, c.scale, bias, bf16, omp_get_max_threads()), 0.0,
                                    bf16 ? "bf16" : "f32"));
  }
}

TEST(DenseAttentionForward, RefusesWhatItCannotRead) {
  const Tensor q = test::rand_f32({1, 4, 2, 8}, 1);
  const Tensor out = Tensor::empty({1, 4, 16});
  EXPECT_THROW(attention::dense_attention_forward(q, q, q.to(kF64).to(kF32).narrow(1, 0, 2), 1.0, Tensor(), false,
                                                  out),
               Error);
  EXPECT_THROW(attention::dense_attention_forward(q, q, q, 1.0, Tensor::zeros({1, 1, 4, 4}, {.dtype = kF64}),
                                                  false, out),
               Error);
  EXPECT_THROW(attention::dense_attention_forward(q, q, q, 1.0, Tensor(), false, Tensor::empty({1, 4, 8})), Error);
}

}  // namespace
}  // namespace titan
