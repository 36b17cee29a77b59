#pragma once
// The hf family's decoder: one model whose variant is a DecoderSpec read from config.json
// (decoder_spec.h). Its blocks are the Llama-family pieces (common::Attention,
// common::FeedForward) with the spec's biases, norms, scales, soft-caps and windows, joined to the
// residual stream as the spec's Residual says; sliding-window layers attend under their own mask
// and layers may each use one of several RoPE tables. Single-device math only.
#include <map>
#include <memory>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/common/moe_stack.h"
#include "titan/models/hf/decoder_spec.h"
#include "titan/nn/moe/moe.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::hf {

class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(int64_t layer_id, const DecoderSpec& spec, TensorOptions opts = {},
                   common::AttentionKernel kernel = {});

  // x [B, S, dim] -> [B, S, dim]; `mask` is this layer's (its window's). An MoE block reports into
  // `pass` (null for dense blocks).
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                 const std::shared_ptr<nn::moe::MoEPass>& pass);
  // The table is the model's; the mask and the pass are captured by value (see common::Attention's
  // call operator).
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    const std::shared_ptr<nn::moe::MoEPass>& pass) {
    return run_forward(
        x, [this, table = &rope, mask, pass](const Tensor& in) { return forward(in, *table, mask, pass); });
  }
  // Inference over `cache`, slot `layer` (see common::Attention::forward_cached).
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                        const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache, int64_t layer);
  // Under no-grad a wrapper calls the body once, so it may capture by reference.
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache, int64_t layer) {
    return run_forward(x, [&](const Tensor& in) { return forward_cached(in, rope, mask, pass, cache, layer); });
  }

  std::shared_ptr<common::Attention> attention;
  std::shared_ptr<common::FeedForward> feed_forward;  // dense blocks
  std::shared_ptr<nn::moe::MoE> moe;                  // MoE blocks
  // Before the sublayers (null in post-norm blocks) and after them (sandwich and post-norm only).
  std::shared_ptr<nn::Norm> attention_norm, ffn_norm;
  std::shared_ptr<nn::Norm> post_attention_norm, post_ffn_norm;

 private:
  // The block around `attend`, the attention sublayer of one forward or the other.
  Tensor around(const Tensor& x, const std::function<Tensor(const Tensor&)>& attend,
                const std::shared_ptr<nn::moe::MoEPass>& pass);

  Residual residual_;
  double residual_scale_;
};

class Transformer : public common::Decoder<TransformerBlock> {
 public:
  // `max_seq_len` sizes the RoPE tables. Parameters of dtype `opts.dtype`, zero until
  // init_weights(gen).
  Transformer(const DecoderSpec& spec, int64_t max_seq_len, TensorOptions opts = {},
              common::AttentionKernel kernel = {});

  const DecoderSpec& spec() const { return spec_; }

  // Mixtral: the load-balancing loss of the last forward, the step's expert load and graph
  // mode's records (common::MoeStack); nothing for a dense model.
  Tensor auxiliary_loss() override { return moe_stack_.auxiliary_loss(); }
  NamedScalars end_step() override { return moe_stack_.end_step(); }
  std::vector<Tensor> take_step_records() override { return moe_stack_.take_step_records(); }
  void put_step_records(std::vector<Tensor> records) override { moe_stack_.put_step_records(std::move(records)); }

 private:
  Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) override;
  Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) override;
  // The model's causal (and document) `mask` by window (0: none), one per window the layers use:
  // built once per forward and shared by the layers that slide by it.
  std::map<int64_t, attention::BlockMask> layer_masks(const attention::BlockMask& mask) const;
  const ops::RopeTable& layer_rope(size_t i) const;

  DecoderSpec spec_;
  common::MoeStack moe_stack_;
  std::vector<ops::RopeTable> ropes_;  // ropes_[0] is the base's table; the others are registered here
};

}  // namespace titan::models::hf
