#pragma once
// Qwen 3 (Qwen Team, 2025), dense and mixture-of-experts: pre-norm decoder blocks of grouped-query
// attention with QK-norm (an RMSNorm over each head of q and k before RoPE, rotate-half layout)
// and a SwiGLU feed-forward, or in the MoE models a top-k mixture of SwiGLU experts without a
// shared expert. Single-device math only; names follow TorchTitan's qwen3.
#include <memory>

#include "titan/attention/block_mask.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/common/moe_stack.h"
#include "titan/models/qwen3/model_args.h"
#include "titan/nn/moe/moe.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::qwen3 {

class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const ModelArgs& args, TensorOptions opts = {},
                   common::AttentionKernel kernel = {});

  // h = x + attention(attention_norm(x)); out = h + ffn(ffn_norm(h)), the ffn being feed_forward
  // or, in an MoE model, moe (which reports into `pass`; null for dense blocks).
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                 const std::shared_ptr<nn::moe::MoEPass>& pass);
  // Through run_forward(x, body), so activation checkpointing can wrap the block; the table is the
  // model's, the mask and the pass are captured by value (see common::Attention's call operator).
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    const std::shared_ptr<nn::moe::MoEPass>& pass) {
    return run_forward(
        x, [this, table = &rope, mask, pass](const Tensor& in) { return forward(in, *table, mask, pass); });
  }

  // Inference over `cache` (see common::Attention::forward_cached); `layer` is this block's cache
  // slot. Under no-grad a wrapper calls the body once, so it may capture by reference.
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                        const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache, int64_t layer);
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache, int64_t layer) {
    return run_forward(x, [&](const Tensor& in) { return forward_cached(in, rope, mask, pass, cache, layer); });
  }

  std::shared_ptr<common::Attention> attention;
  std::shared_ptr<common::FeedForward> feed_forward;  // dense blocks
  std::shared_ptr<nn::moe::MoE> moe;                  // MoE blocks
  std::shared_ptr<nn::RMSNorm> attention_norm, ffn_norm;
};

// The skeleton (embedding, norm, output or tied embedding, RoPE tables, forwards) is
// common::Decoder's; Qwen's own are its block and the MoE pass its forwards thread through it.
class Transformer : public common::Decoder<TransformerBlock> {
 public:
  // Parameters of dtype `opts.dtype` (f32 to train; f64 for gradient checks), all zero until
  // init_weights(gen).
  explicit Transformer(const ModelArgs& args, TensorOptions opts = {}, common::AttentionKernel kernel = {});

  const ModelArgs& args() const { return args_; }

  // MoE: aux_loss_coeff times the load-balancing loss of the last forward (args.load_balance_loss:
  // the mean over layers of theirs, or the global one). Undefined for a dense model, or with the
  // coefficient at 0.
  Tensor auxiliary_loss() override;
  // MoE: the expert-bias update (when on) and the step's expert load, as moe/tokens_min,
  // moe/tokens_max and moe/tokens_cv (see nn::moe::expert_load). Nothing for a dense model.
  NamedScalars end_step() override;
  std::vector<Tensor> take_step_records() override;
  void put_step_records(std::vector<Tensor> records) override;

 private:
  Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) override;
  Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) override;
  ModelArgs args_;
  common::MoeStack moe_stack_;
};

}  // namespace titan::models::qwen3
