#pragma once
// The forward of attention with an additive bias on its scores, softmax(scale * q k^T + bias) v,
// fused for inference: what the frozen text encoders (T5's relative-position bias, CLIP's causal
// and padding masks) run. Done as separate ops it writes the [B, H, S, S] scores three times
// (products, biased, probabilities) to fresh memory and copies q, k and v into head-major order;
// here each task takes a block of one head's query rows, whose scores stay in cache from the
// product through the bias and softmax to the product with v, and reads q, k, v and writes the
// output in their [B, S, H, D] layout. On T5's shape (8 x 256 tokens, 8 heads of 64, bf16, one
// Zen 4 core) a layer's attention took 18.7 ms as ops.
//
// No backward: with gradients wanted, models::common::dense_attention runs the ops, whose
// backward autograd derives (and which are this kernel's reference in its test).
#include "titan/core/tensor.h"

namespace titan::attention {

// out [B, S, H * D] = softmax(scale * q k^T + bias) v per head, written whole. q, k, v [B, S, H, D]
// f32 and contiguous; bias f32 broadcastable to [B, H, S, S], or undefined. The softmax is
// ops::softmax's row by row (a row of the dtype's lowest values, a mask's, is uniform, as
// transformers' eager path keeps it). bf16_products: the two products multiply bf16 copies of q,
// k, v and of the probabilities with f32 sums, as the ops do under AutocastGuard(kBF16).
void dense_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& bias,
                             bool bf16_products, const Tensor& out);

}  // namespace titan::attention
