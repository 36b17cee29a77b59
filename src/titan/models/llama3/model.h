#pragma once
// Llama 3 (Grattafiori et al., 2024): pre-norm decoder blocks of grouped-query attention with
// rotary positions and a SwiGLU feed-forward. Single-device math only: parallel/ shards and wraps
// these modules from outside, through their parameter names and forward hooks. Names and
// initialisation follow TorchTitan's llama3, so its checkpoints load as they are.
#include <memory>

#include "titan/attention/block_mask.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/llama3/model_args.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::llama3 {

// The shared pieces, under the names this family's code and its users know them by.
using common::Attention;
using common::AttentionKernel;
using common::FeedForward;

class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const ModelArgs& args, TensorOptions opts = {},
                   AttentionKernel kernel = {});

  // h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)).
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask);
  // Through run_forward(x, body), so activation checkpointing can wrap the block (see Attention's
  // call operator for why the table may be held and the mask is copied).
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
    return run_forward(x,
                       [this, table = &rope, mask](const Tensor& in) { return forward(in, *table, mask); });
  }

  // Inference over `cache` (see Attention::forward_cached); `layer` is this block's cache slot.
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                        KVCache& cache, int64_t layer);
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    KVCache& cache, int64_t layer) {
    return run_forward(x, [&](const Tensor& in) { return forward_cached(in, rope, mask, cache, layer); });
  }

  std::shared_ptr<Attention> attention;
  std::shared_ptr<FeedForward> feed_forward;
  std::shared_ptr<nn::RMSNorm> attention_norm, ffn_norm;
};

// The skeleton (embedding, norm, output, RoPE tables, forwards) is common::Decoder's; Llama's own
// are its block and Llama 3.1's RoPE frequency scaling.
class Transformer : public common::Decoder<TransformerBlock> {
 public:
  // Parameters of dtype `opts.dtype` (f32 to train; f64 for gradient checks), all zero until
  // init_weights(gen).
  explicit Transformer(const ModelArgs& args, TensorOptions opts = {}, AttentionKernel kernel = {});

  const ModelArgs& args() const { return args_; }

 private:
  Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) override;
  Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) override;

  ModelArgs args_;
};

}  // namespace titan::models::llama3
