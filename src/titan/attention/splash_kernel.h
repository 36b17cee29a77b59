#pragma once
// The tile kernels behind splash_attention, for callers that build attention from parts:
// context parallelism's ring attention runs each rank's queries against one block of keys at a
// time and merges the partial results by their logsumexp. No autograd and no argument checks
// (splash_attention and ring_attention check theirs); tensors are dense CPU tensors of one float
// dtype in the layouts below, q [B, S, Hq, D], k and v [B, S, Hkv, D], per-row statistics [B, Hq, S].
// `mask` is built for S tokens (and B rows where its rule holds per-row data).
//
// bf16_products: multiply the tiles' bf16 copies with f32 sums, as splash_attention does under
// AutocastGuard(kBF16) (f32 inputs only); forward and backward must agree on it.
#include "titan/attention/block_mask.h"
#include "titan/attention/scores.h"
#include "titan/core/tensor.h"

namespace titan::attention {

// out = softmax(scores(q k^T) + mask) v over the keys `mask` shows (normalised over those alone),
// and lse their logsumexp per row. A row that sees none of these keys gets out 0 and lse -inf,
// which merge_partial_attention treats as "nothing seen". out and lse are written whole.
void splash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                    const Scores& scores, bool bf16_products, const Tensor& out, const Tensor& lse);

// Gradients of attention whose rows' statistics are `lse` (logsumexp over every key the row sees,
// in this call or others) and `delta` = rowsum(dout * out) of the whole output, over the keys
// `mask` shows. With `out` defined, delta is computed here from out and dout (into `delta`);
// else `delta` is read. dq, dk, dv are each optional; accumulate = false writes them whole,
// true adds into them.
void splash_backward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                     const Scores& scores, bool bf16_products, const Tensor& out, const Tensor& lse,
                     const Tensor& delta, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                     const Tensor& dv, bool accumulate);

// Folds a partial result (out_part, lse_part over some keys) into (out, lse) over others, so that
// (out, lse) is attention over both sets of keys: weights exp(lse_x - lse_new), lse_new =
// log(exp(lse) + exp(lse_part)). Rows whose part is -inf are left as they are; a row of (out,
// lse) that is -inf takes the part's exactly.
void merge_partial_attention(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                             const Tensor& lse_part);

}  // namespace titan::attention
