#pragma once
// Splash attention: block-sparse flash attention on the CPU. softmax(scores(q k^T) + mask) v is
// computed one block_q x block_kv tile at a time with an online softmax, so no [seq, seq] tensor
// ever exists; forward keeps only each row's logsumexp, and backward recomputes the
// probabilities tile by tile. The BlockMask decides the work: key blocks the mask hides from a
// query block are never touched, fully visible ones run without looking at the mask, and only
// partly visible ones evaluate the mask rule for their pairs.
#include <optional>

#include "titan/attention/block_mask.h"
#include "titan/core/tensor.h"

namespace titan::attention {

// The scores are scale * q k^T, capped to softcap * tanh(scores / softcap) when softcap is set
// (Gemma 2's attn_logit_softcapping; scores.h), before the mask.
struct SplashOptions {
  std::optional<double> scale = std::nullopt;    // multiplies q k^T; unset: 1 / sqrt(head_dim)
  std::optional<double> softcap = std::nullopt;  // finite, > 0; unset: no cap
};

// q [B, S, Hq, D], k and v [B, S, Hkv, D] (f32 or f64, one dtype) -> [B, S, Hq, D], contiguous;
// the layout of attention_reference. Hq must be a multiple of Hkv: query head h reads kv head
// h / (Hq / Hkv) in place (grouped-query attention; Hkv = 1 is multi-query), never a repeated
// copy. `mask` must be built for S tokens (and for B rows if its rule holds per-row data).
//
// Work is spread on OpenMP threads over (batch, head, query block) in forward, and over (batch,
// kv head, run of key blocks) in backward, which gathers dQ, dK and dV in one pass; each tile's
// GEMMs are single-threaded. No atomics: every output row is accumulated by one task in a fixed
// order (dQ's runs are summed in run order), so reruns are bit-identical whatever the thread
// count.
//
// Under AutocastGuard(kBF16), with f32 inputs, the tiles' products (Q K^T and P V forward;
// dO V^T, P^T dO, dS^T Q and dS K backward) multiply bf16 copies of q, k, v, dout and of each
// tile's probabilities P and score gradients dS, with float32 sums, as FlashAttention's bf16
// kernels do; the softmax statistics (running max and sum, logsumexp, rowsum(dO * O)), the output
// and the gradients stay f32, and so do the op's inputs and outputs. Forward decides, and its
// backward multiplies as it did whatever autocast says when backward runs.
Tensor splash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                        const SplashOptions& opts = {});

}  // namespace titan::attention
