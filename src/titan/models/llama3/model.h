#pragma once
// Llama 3 (Grattafiori et al., 2024): pre-norm decoder blocks of grouped-query attention with
// rotary positions and a SwiGLU feed-forward. Single-device math only: parallel/ shards and wraps
// these modules from outside, through their parameter names and forward hooks. Names and
// initialisation follow TorchTitan's llama3, so its checkpoints load as they are.
#include <memory>

#include "titan/attention/block_mask.h"
#include "titan/models/causal_lm.h"
#include "titan/models/llama3/model_args.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::llama3 {

// The attention kernel of every block ([model] attention, [attention] block_q / block_kv):
// splash attention over a causal BlockMask of block_q x block_kv tiles, or the reference path,
// which materialises the scores and is kept to compare against.
struct AttentionKernel {
  bool splash = true;
  int64_t block_q = attention::kDefaultBlockQ;
  int64_t block_kv = attention::kDefaultBlockKv;
};

class Attention : public nn::Module {
 public:
  // `init_std`: the std of wo at initialisation (depth-scaled per block).
  Attention(const ModelArgs& args, double init_std, TensorOptions opts = {}, AttentionKernel kernel = {});

  // x [B, S, dim] -> [B, S, dim]. Head counts are read from the projections' output sizes, so a
  // tensor-parallel plan that shards wq/wk/wv by heads leaves this code as it is. `mask` is the
  // causal mask for S tokens (the reference path is causal by construction).
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask);
  // The table is the model's and outlives backward, so a wrapper that re-runs the body there
  // (activation checkpointing) may hold on to it; the mask is this step's, so it is copied (a
  // copy shares the lists).
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
    return run_forward(x,
                       [this, table = &rope, mask](const Tensor& in) { return forward(in, *table, mask); });
  }
  // Inference: x [B, S, dim] at positions [cache.length(), cache.length() + S); appends this
  // layer's keys and values to `cache` (slot `layer`) and attends over all it holds. Tokens that
  // start the sequence run the training kernel (with `mask`, their causal mask); later ones
  // attend over the cache with decode_attention.
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                        KVCache& cache, int64_t layer);
  // Inference runs under no-grad, where a wrapper only calls the body, once: it may capture by
  // reference.
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    KVCache& cache, int64_t layer) {
    return run_forward(x, [&](const Tensor& in) { return forward_cached(in, rope, mask, cache, layer); });
  }
  // TorchTitan's: wq, wk, wv truncated normal with std 0.02; wo with init_std.
  void reset_parameters(Generator& gen) override;

  std::shared_ptr<nn::Linear> wq, wk, wv, wo;

 private:
  struct Qkv {
    Tensor q, k, v;  // [B, S, heads, head_dim]
  };
  // The projections of x, q and k rotated for positions [start_pos, start_pos + S).
  Qkv project(const Tensor& x, const ops::RopeTable& rope, int64_t start_pos);
  // The configured kernel over the q, k and v of the same S tokens.
  Tensor attend(const Qkv& qkv, const attention::BlockMask& mask) const;

  int64_t head_dim_;
  double init_std_;
  AttentionKernel kernel_;
};

class FeedForward : public nn::Module {
 public:
  FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  // TorchTitan's: w1 truncated normal with std 0.02; w2 and w3 with init_std.
  void reset_parameters(Generator& gen) override;

  std::shared_ptr<nn::Linear> w1, w2, w3;

 private:
  double init_std_;
};

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

class Transformer : public CausalLM {
 public:
  // Parameters of dtype `opts.dtype` (f32 to train; f64 for gradient checks), all zero until
  // init_weights(gen).
  explicit Transformer(const ModelArgs& args, TensorOptions opts = {}, AttentionKernel kernel = {});

  // tokens [B, S] (i32/i64), S <= args.max_seq_len -> logits [B, S, vocab_size].
  Tensor forward(const Tensor& tokens);
  Tensor operator()(const Tensor& tokens) override {
    return run_forward(tokens, [this](const Tensor& in) { return forward(in); });
  }
  // tokens [B, S] at positions [cache.length(), cache.length() + S), within max_seq_len.
  Tensor forward_cached(const Tensor& tokens, KVCache& cache) override;
  int64_t vocab_size() const override { return args_.vocab_size; }
  int64_t max_seq_len() const override { return args_.max_seq_len; }
  const ModelArgs& args() const { return args_; }
  // TorchTitan's final projection: truncated normal with std dim^-0.5, cut at 3 std. (The token
  // embedding's normal(0, 1) and the norms' ones are those modules' own defaults.)
  void reset_parameters(Generator& gen) override;

  std::shared_ptr<nn::Embedding> tok_embeddings;
  std::shared_ptr<nn::ModuleList<TransformerBlock>> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> output;

 private:
  ModelArgs args_;
  AttentionKernel kernel_;
  ops::RopeTable rope_;  // cos/sin registered as non-persistent buffers: derived, so never saved
};

}  // namespace titan::models::llama3
