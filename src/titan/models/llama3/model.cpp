#include "titan/models/llama3/model.h"

#include <cmath>

#include "titan/attention/decode.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/autograd/grad_mode.h"
#include "titan/nn/init.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"

namespace titan::models::llama3 {

namespace {

// TorchTitan's default truncation: PyTorch's trunc_normal_ bounds are absolute, so at std 0.02
// the cut at +-2 is 100 std away and changes nothing.
void trunc_normal(const std::shared_ptr<nn::Linear>& layer, double std, Generator& gen) {
  nn::init::trunc_normal_(layer->weight, 0.0, std, -2.0, 2.0, gen);
}
constexpr double kInitStd = 0.02;

}  // namespace

// ---- Attention ----------------------------------------------------------------------------------

Attention::Attention(const ModelArgs& args, double init_std, TensorOptions opts, AttentionKernel kernel)
    : head_dim_(args.head_dim()), init_std_(init_std), kernel_(kernel) {
  const int64_t q_dim = args.n_heads * head_dim_, kv_dim = args.n_kv_heads * head_dim_;
  wq = register_module("wq", std::make_shared<nn::Linear>(args.dim, q_dim, false, opts));
  wk = register_module("wk", std::make_shared<nn::Linear>(args.dim, kv_dim, false, opts));
  wv = register_module("wv", std::make_shared<nn::Linear>(args.dim, kv_dim, false, opts));
  wo = register_module("wo", std::make_shared<nn::Linear>(q_dim, args.dim, false, opts));
}

Attention::Qkv Attention::project(const Tensor& x, const ops::RopeTable& rope, int64_t start_pos) {
  const int64_t B = x.size(0), S = x.size(1);
  Tensor q = (*wq)(x).view({B, S, -1, head_dim_});
  Tensor k = (*wk)(x).view({B, S, -1, head_dim_});
  Tensor v = (*wv)(x).view({B, S, -1, head_dim_});
  // Meta's layout: dims (2i, 2i + 1) rotate together, as their complex multiply pairs them.
  q = ops::rope(q, rope, ops::RopeLayout::interleaved, start_pos);
  k = ops::rope(k, rope, ops::RopeLayout::interleaved, start_pos);
  return {q, k, v};
}

Tensor Attention::attend(const Qkv& qkv, const attention::BlockMask& mask) const {
  // Both scale by 1/sqrt(head_dim).
  return kernel_.splash ? attention::splash_attention(qkv.q, qkv.k, qkv.v, mask)
                        : attention::attention_reference(qkv.q, qkv.k, qkv.v);
}

Tensor Attention::forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
  const int64_t B = x.size(0), S = x.size(1);
  return (*wo)(attend(project(x, rope, 0), mask).view({B, S, -1}));
}

Tensor Attention::forward_cached(const Tensor& x, const ops::RopeTable& rope,
                                 const attention::BlockMask& mask, KVCache& cache, int64_t layer) {
  const int64_t B = x.size(0), S = x.size(1), start = cache.length();
  Qkv qkv = project(x, rope, start);
  auto [keys, values] = cache.append(layer, qkv.k, qkv.v);
  // A prompt that starts the sequence computes what training computes, with the same kernel (and
  // with splash, no [S, S] scores); later tokens read the keys before them from the cache.
  Tensor out = start == 0 ? attend(qkv, mask) : attention::decode_attention(qkv.q, keys, values);
  return (*wo)(out.view({B, S, -1}));
}

void Attention::reset_parameters(Generator& gen) {
  for (const auto& w : {wq, wk, wv}) trunc_normal(w, kInitStd, gen);
  trunc_normal(wo, init_std_, gen);
}

// ---- FeedForward --------------------------------------------------------------------------------

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts)
    : init_std_(init_std) {
  w1 = register_module("w1", std::make_shared<nn::Linear>(dim, hidden_dim, false, opts));
  w2 = register_module("w2", std::make_shared<nn::Linear>(hidden_dim, dim, false, opts));
  w3 = register_module("w3", std::make_shared<nn::Linear>(dim, hidden_dim, false, opts));
}

Tensor FeedForward::forward(const Tensor& x) {
  return (*w2)(ops::swiglu((*w1)(x), (*w3)(x)));
}

void FeedForward::reset_parameters(Generator& gen) {
  trunc_normal(w1, kInitStd, gen);
  trunc_normal(w2, init_std_, gen);
  trunc_normal(w3, init_std_, gen);
}

// ---- TransformerBlock ---------------------------------------------------------------------------

TransformerBlock::TransformerBlock(int64_t layer_id, const ModelArgs& args, TensorOptions opts,
                                   AttentionKernel kernel) {
  // TorchTitan's depth init: the projections that write into the residual stream (wo, w2; and
  // w3, as TorchTitan has it) start smaller the deeper the block, so the stream's variance grows
  // slowly with depth.
  const double init_std = kInitStd / std::sqrt(2.0 * static_cast<double>(layer_id + 1));
  attention = register_module("attention", std::make_shared<Attention>(args, init_std, opts, kernel));
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

Tensor Transformer::forward(const Tensor& tokens) {
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) <= args_.max_seq_len,
              "llama3 Transformer: expected tokens [batch, seq] with seq <= max_seq_len (", args_.max_seq_len,
              "), got ", tokens.desc(), "; build the model with a larger max_seq_len");
  // One mask for every layer, built per call: for a causal rule it is a few microseconds.
  const auto mask = attention::BlockMask::build(attention::Mask::causal(), tokens.size(0), tokens.size(1),
                                                kernel_.block_q, kernel_.block_kv);
  Tensor h = (*tok_embeddings)(tokens);
  for (const auto& layer : *layers) h = (*layer)(h, rope_, mask);
  return (*output)((*norm)(h));
}

Tensor Transformer::forward_cached(const Tensor& tokens, KVCache& cache) {
  autograd::NoGradGuard no_grad;
  const int64_t start = cache.length();
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && start + tokens.size(1) <= args_.max_seq_len,
              "llama3 Transformer::forward_cached: expected tokens [batch, seq >= 1] at positions from ",
              start, " on, ending within max_seq_len (", args_.max_seq_len, "), got ", tokens.desc(),
              "; the model has no positions beyond its max_seq_len");
  // Read only when the tokens start the sequence (see Attention::forward_cached); for one token
  // it is a single tile.
  const auto mask = attention::BlockMask::build(attention::Mask::causal(), tokens.size(0), tokens.size(1),
                                                kernel_.block_q, kernel_.block_kv);
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
