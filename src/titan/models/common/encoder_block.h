#pragma once
// The pre-norm block of the text encoders (T5's, CLIP's): h = x + attention(norm1(x)),
// out = h + feed_forward(norm2(h)), over DenseSelfAttention and FeedForward. The families differ
// in the norms (T5: RMS; CLIP: LayerNorm with bias), the attention's biases and scale, and the
// feed-forward, all given as data.
#include <cstdint>
#include <memory>

#include "titan/models/common/dense_attention.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/common/norm_args.h"

namespace titan::models::common {

struct EncoderBlockArgs {
  int64_t dim = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  bool attention_bias = false;  // wq, wk, wv and wo with biases
  double scale = 1.0;           // what q k^T is multiplied by
  NormArgs norm;
  int64_t ffn_dim = 0;
  FeedForwardArgs feed_forward;
};

class EncoderBlock : public nn::Module {
 public:
  explicit EncoderBlock(const EncoderBlockArgs& args, TensorOptions opts = {});
  // x [B, S, dim]; `bias` is added to every head's scores (see dense_attention).
  Tensor forward(const Tensor& x, const Tensor& bias);
  Tensor operator()(const Tensor& x, const Tensor& bias) {
    return run_forward(x, [this, bias](const Tensor& in) { return forward(in, bias); });
  }

  std::shared_ptr<nn::Norm> attention_norm, ffn_norm;
  std::shared_ptr<DenseSelfAttention> attention;
  std::shared_ptr<FeedForward> feed_forward;
};

}  // namespace titan::models::common
