#pragma once
// Llama 3 (Grattafiori et al., 2024): pre-norm decoder blocks of grouped-query attention with
// rotary positions and a SwiGLU feed-forward. Single-device math only: parallel/ shards and wraps
// these modules from outside, through their parameter names and forward hooks. Names and
// initialisation follow TorchTitan's llama3, so its checkpoints load as they are.
#include <memory>

#include "titan/attention/block_mask.h"
#include "titan/models/causal_lm.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/llama3/model_args.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
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

class Transformer : public CausalLM {
 public:
  // Parameters of dtype `opts.dtype` (f32 to train; f64 for gradient checks), all zero until
  // init_weights(gen).
  explicit Transformer(const ModelArgs& args, TensorOptions opts = {}, AttentionKernel kernel = {});

  // tokens [B, S] (i32/i64), S <= args.max_seq_len -> logits [B, S, vocab_size].
  // With document_ids [B, S] defined, a token attends only within its document.
  Tensor forward(const Tensor& tokens, const Tensor& document_ids = {});
  Tensor operator()(const Tensor& tokens, const Tensor& document_ids) override {
    return run_forward(tokens, [this, document_ids](const Tensor& in) { return forward(in, document_ids); });
  }
  using CausalLM::operator();
  int64_t num_layers() const override { return args_.n_layers; }
  int64_t hidden_size() const override { return args_.dim; }
  Tensor forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden, int64_t first,
                        int64_t last) override;
  // tokens [B, S] at positions [cache.position(), + S), within max_seq_len.
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
