#include "titan/models/common/encoder_block.h"

#include "titan/models/common/init.h"
#include "titan/ops/arith.h"

namespace titan::models::common {

EncoderBlock::EncoderBlock(const EncoderBlockArgs& a, TensorOptions opts) {
  attention_norm = register_module("attention_norm", make_norm(a.dim, a.norm, opts));
  attention = register_module(
      "attention",
      std::make_shared<DenseSelfAttention>(a.dim, a.n_heads, a.head_dim, a.attention_bias, a.scale, opts));
  ffn_norm = register_module("ffn_norm", make_norm(a.dim, a.norm, opts));
  feed_forward = register_module(
      "feed_forward", std::make_shared<FeedForward>(a.dim, a.ffn_dim, kInitStd, opts, a.feed_forward));
}

Tensor EncoderBlock::forward(const Tensor& x, const Tensor& bias) {
  const Tensor h = x + (*attention)((*attention_norm)(x), bias);
  return h + (*feed_forward)((*ffn_norm)(h));
}

}  // namespace titan::models::common
