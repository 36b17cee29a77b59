#include "titan/models/llama3/model.h"

#include "titan/models/common/init.h"
#include "titan/models/common/run_blocks.h"
#include "titan/ops/arith.h"

namespace titan::models::llama3 {

// ---- TransformerBlock ---------------------------------------------------------------------------

TransformerBlock::TransformerBlock(int64_t layer_id, const ModelArgs& args, TensorOptions opts,
                                   AttentionKernel kernel) {
  // Depth-scaled: wo, w2 and (as TorchTitan has it) w3.
  const double init_std = common::depth_init_std(layer_id);
  // Meta's RoPE layout: dims (2i, 2i + 1) rotate together, as their complex multiply pairs them.
  const common::AttentionArgs attention_args{.dim = args.dim,
                                             .n_heads = args.n_heads,
                                             .n_kv_heads = args.n_kv_heads,
                                             .head_dim = args.head_dim(),
                                             .rope_layout = ops::RopeLayout::interleaved};
  attention =
      register_module("attention", std::make_shared<Attention>(attention_args, init_std, opts, kernel));
  feed_forward = register_module(
      "feed_forward", std::make_shared<FeedForward>(args.dim, args.ffn_hidden_dim(), init_std, opts));
  attention_norm =
      register_module("attention_norm", std::make_shared<nn::RMSNorm>(args.dim, args.norm_eps, opts));
  ffn_norm = register_module("ffn_norm", std::make_shared<nn::RMSNorm>(args.dim, args.norm_eps, opts));
}

Tensor TransformerBlock::forward(const Tensor& x, const ops::RopeTable& rope,
                                 const attention::BlockMask& mask) {
  Tensor h = x + (*attention)((*attention_norm)(x), rope, mask);
  return h + (*feed_forward)((*ffn_norm)(h));
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const ops::RopeTable& rope,
                                        const attention::BlockMask& mask, KVCache& cache, int64_t layer) {
  Tensor h = x + (*attention)((*attention_norm)(x), rope, mask, cache, layer);
  return h + (*feed_forward)((*ffn_norm)(h));
}

// ---- Transformer --------------------------------------------------------------------------------

namespace {

// Validates first: the base allocates the embedding before any block exists.
common::DecoderArgs decoder_args(const ModelArgs& args) {
  args.validate();
  return {.family = "llama3",
          .vocab_size = args.vocab_size,
          .dim = args.dim,
          .n_layers = args.n_layers,
          .head_dim = args.head_dim(),
          .max_seq_len = args.max_seq_len,
          .norm = {.eps = args.norm_eps},
          .rope_theta = args.rope_theta,
          .rope_scaling = args.rope_scaling_if_used()};
}

}  // namespace

Transformer::Transformer(const ModelArgs& args, TensorOptions opts, AttentionKernel kernel)
    : Decoder(decoder_args(args), opts, kernel,
              [&](int64_t i) { return std::make_shared<TransformerBlock>(i, args, opts, kernel); }),
      args_(args) {}

Tensor Transformer::forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) {
  return common::run_blocks(*layers, first, last, h,
                            [this, mask](TransformerBlock& block, const Tensor& x) { return block(x, rope(), mask); });
}

Tensor Transformer::forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) {
  Tensor out = h;
  int64_t layer = 0;
  for (const auto& block : *layers) out = (*block)(out, rope(), mask, cache, layer++);
  return out;
}

}  // namespace titan::models::llama3
