#include "titan/models/llama3/model.h"

#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/models/common/init.h"
#include "titan/models/common/run_blocks.h"
#include "titan/nn/init.h"
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

Transformer::Transformer(const ModelArgs& args, TensorOptions opts, AttentionKernel kernel)
    : args_(args), kernel_(kernel) {
  args_.validate();
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<nn::Embedding>(args_.vocab_size, args_.dim, opts));
  layers = register_module("layers", std::make_shared<nn::ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < args_.n_layers; ++i)
    layers->push_back(std::make_shared<TransformerBlock>(i, args_, opts, kernel_));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(args_.dim, args_.norm_eps, opts));
  output = register_module("output", std::make_shared<nn::Linear>(args_.dim, args_.vocab_size, false, opts));
  rope_ = ops::RopeTable::build(args_.head_dim(), args_.max_seq_len, args_.rope_theta,
                                args_.rope_scaling_if_used());
  rope_.cos = register_buffer("rope_cos", rope_.cos, false);
  rope_.sin = register_buffer("rope_sin", rope_.sin, false);
}

Tensor Transformer::forward(const Tensor& tokens, const Tensor& document_ids) {
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) <= args_.max_seq_len,
              "llama3 Transformer: expected tokens [batch, seq] with seq <= max_seq_len (", args_.max_seq_len,
              "), got ", tokens.desc(), "; build the model with a larger max_seq_len");
  return forward_layers(tokens, document_ids, Tensor(), 0, args_.n_layers);
}

Tensor Transformer::forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden,
                                   int64_t first, int64_t last) {
  common::check_layer_span(tokens, hidden, first, last, args_.n_layers, args_.max_seq_len, "llama3");
  const auto mask = common::layer_mask(tokens, document_ids, kernel_);
  Tensor h = first == 0 ? (*tok_embeddings)(tokens) : hidden;
  h = common::run_blocks(*layers, first, last, h,
                         [this, mask](TransformerBlock& block, const Tensor& x) { return block(x, rope_, mask); });
  return last == args_.n_layers ? (*output)((*norm)(h)) : h;
}

Tensor Transformer::forward_cached(const Tensor& tokens, KVCache& cache) {
  autograd::NoGradGuard no_grad;
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && cache.reach(tokens.size(1)) <= args_.max_seq_len,
              "llama3 Transformer::forward_cached: expected tokens [batch, seq >= 1] reaching no further than "
              "max_seq_len (", args_.max_seq_len, ") from the cache's position, got ", tokens.desc(), " reaching ",
              cache.reach(tokens.dim() == 2 ? tokens.size(1) : 1), "; the model has no positions beyond its max_seq_len");
  // Read only when the tokens start the sequence (see Attention::forward_cached); for one token
  // it is a single tile.
  const auto mask = common::layer_mask(tokens, Tensor(), kernel_);
  Tensor h = (*tok_embeddings)(tokens);
  int64_t layer = 0;
  for (const auto& block : *layers) h = (*block)(h, rope_, mask, cache, layer++);
  cache.advance(tokens.size(1));
  return (*output)((*norm)(h));
}

void Transformer::reset_parameters(Generator& gen) {
  const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
  nn::init::trunc_normal_(output->weight, 0.0, std, -3 * std, 3 * std, gen);
}

}  // namespace titan::models::llama3
