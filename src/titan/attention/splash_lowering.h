#pragma once
// Attention in graph mode: softmax(scores(q k^T) + mask) v (scores.h), forward and backward, as StableHLO of
// the step being captured, for splash_attention and attention_reference given lazy tensors. The
// mask rule is evaluated inside the program (Mask::visible) from iota positions and, for packed
// documents, the step's document ids. attention_choice.h picks the form: one custom call each way
// to splash's CPU kernels (splash_custom_call.h) or to cuDNN's flash attention
// (cudnn_attention.h), or XLA's lowering, dense or in tiles.
#include "titan/attention/attention_choice.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/scores.h"
#include "titan/core/tensor.h"

namespace titan::attention {

// q [B, S, Hq, D], k and v [B, S, Hkv, D] of one floating dtype, at least one lazy (the caller
// checked shapes) -> out [B, S, Hq, D], with `op`'s autograd node recorded when a gradient is
// wanted. bf16_products: the products take bf16 operands with f32 sums, as splash's kernel does
// under bf16 autocast; the softmax statistics, outputs and gradients stay in q's dtype (cuDNN's
// calls take bf16 throughout: their outputs and gradients are converted back to q's dtype).
Tensor lowered_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                         const BlockMask& mask, const Scores& scores, bool bf16_products);

}  // namespace titan::attention
