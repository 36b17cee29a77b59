#pragma once
// Attention in graph mode: softmax(scores(q k^T) + mask) v (scores.h), forward and backward, as StableHLO of
// the step being captured, for splash_attention and attention_reference given lazy tensors. The
// mask rule is evaluated inside the program (Mask::visible) from iota positions and, for packed
// documents, the step's document ids. Where the program allows custom kernels
// (Program::custom_kernels) and the rule and dtype fit them, forward and backward are instead one
// custom call each to splash's CPU kernels (splash_custom_call.h).
#include "titan/attention/block_mask.h"
#include "titan/attention/scores.h"
#include "titan/core/tensor.h"

namespace titan::attention {

// Sequences up to this length run as one masked softmax over [S, S] scores per head; longer ones
// as a loop over tiles with an online softmax (flash attention), never more than block_q x
// block_kv scores per head at once, skipping the key blocks the BlockMask hides from a query block.
// Measured on the CPU plugin (XLA CPU, 2 shared cores, best of 3-7) at the debug model's head
// shape: B 8, Hq = Hkv 16, D 16, causal, forward + backward, f32, 128 x 128 tiles; ms, dense /
// tiled: S 64: 20 / 63, 128: 123 / 70, 192: 277 / 196, 256: 496 / 264, 512: 1832 / 1056,
// 1024: 6081 / 2216, 2048: 17172 / 5091. Tiles win from one whole tile up (they skip the causal
// upper half and keep the scores in cache); below that they pad the sequence to a tile.
inline constexpr int64_t kDenseMaxSeq = 64;

// q [B, S, Hq, D], k and v [B, S, Hkv, D] of one floating dtype, at least one lazy (the caller
// checked shapes) -> out [B, S, Hq, D], with `op`'s autograd node recorded when a gradient is
// wanted. bf16_products: the products take bf16 operands with f32 sums, as splash's kernel does
// under bf16 autocast; the softmax statistics, outputs and gradients stay in q's dtype.
Tensor lowered_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                         const BlockMask& mask, const Scores& scores, bool bf16_products);

}  // namespace titan::attention
