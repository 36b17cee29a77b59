#pragma once
// Self-attention with its [B, H, S, S] scores materialised and an additive bias on them: what the
// text encoders of FLUX (T5's relative-position bias, CLIP's causal and padding masks) need and
// attention_reference and splash do not take. They run frozen at S <= 512 (T5) and 77 (CLIP),
// where the scores of one layer are at most B x 64 x 512 x 512 floats, 64 MiB per row of the
// batch, and are not kept past the layer under no-grad.
#include <cstdint>
#include <memory>

#include "titan/core/tensor.h"
#include "titan/nn/linear.h"

namespace titan::models::common {

// softmax(scale * q k^T + bias) v. q, k, v [B, S, H, D] (one floating dtype); bias broadcastable
// to [B, H, S, S] in the scores' dtype, or undefined. Returns [B, S, H * D].
Tensor dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& bias);

// transformers' additive mask for `seq` tokens in `dtype`: 0 where query q may see key k, the
// dtype's lowest value elsewhere (exp of it is 0, and a row of such values stays finite in
// softmax, as transformers' eager path keeps it). `attention_mask` [B, seq] (i32 or i64, 1 a token
// and 0 padding) hides padded keys, or is undefined; `causal` hides keys after the query. Shape
// [B or 1, 1, seq or 1, seq]; undefined when nothing is hidden. A host tensor: eager mode only.
Tensor attention_bias(const Tensor& attention_mask, int64_t seq, bool causal, DType dtype);

// Multi-head self-attention over dense_attention: projections wq, wk, wv [heads * head_dim, dim]
// and wo [dim, heads * head_dim], with or without biases, the scores multiplied by `scale`.
class DenseSelfAttention : public nn::Module {
 public:
  DenseSelfAttention(int64_t dim, int64_t n_heads, int64_t head_dim, bool bias, double scale,
                     TensorOptions opts = {});
  // x [B, S, dim], `bias` added to the scores (see dense_attention) -> [B, S, dim].
  Tensor forward(const Tensor& x, const Tensor& bias);
  // The bias is this forward's: captured by value, for a wrapper that re-runs the body.
  Tensor operator()(const Tensor& x, const Tensor& bias) {
    return run_forward(x, [this, bias](const Tensor& in) { return forward(in, bias); });
  }

  std::shared_ptr<nn::Linear> wq, wk, wv, wo;

 private:
  int64_t n_heads_, head_dim_;
  double scale_;
};

}  // namespace titan::models::common
