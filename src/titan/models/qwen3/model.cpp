#include "titan/models/qwen3/model.h"

#include "titan/models/common/init.h"
#include "titan/models/common/run_blocks.h"
#include "titan/ops/arith.h"

namespace titan::models::qwen3 {

// ---- TransformerBlock ---------------------------------------------------------------------------

TransformerBlock::TransformerBlock(int64_t layer_id, const ModelArgs& args, TensorOptions opts,
                                   common::AttentionKernel kernel) {
  const double init_std = common::depth_init_std(layer_id);
  const common::AttentionArgs attention_args{.dim = args.dim,
                                             .n_heads = args.n_heads,
                                             .n_kv_heads = args.n_kv_heads,
                                             .head_dim = args.head_dim,
                                             .rope_layout = ops::RopeLayout::rotate_half,
                                             .qk_norm_eps = args.norm_eps};
  attention = register_module("attention",
                              std::make_shared<common::Attention>(attention_args, init_std, opts, kernel));
  if (args.moe)
    moe =
        register_module("moe", std::make_shared<nn::moe::MoE>(layer_id, args.dim, *args.moe, init_std, opts));
  else
    feed_forward = register_module(
        "feed_forward", std::make_shared<common::FeedForward>(args.dim, args.ffn_dim, init_std, opts));
  attention_norm =
      register_module("attention_norm", std::make_shared<nn::RMSNorm>(args.dim, args.norm_eps, opts));
  ffn_norm = register_module("ffn_norm", std::make_shared<nn::RMSNorm>(args.dim, args.norm_eps, opts));
}

Tensor TransformerBlock::forward(const Tensor& x, const ops::RopeTable& rope,
                                 const attention::BlockMask& mask,
                                 const std::shared_ptr<nn::moe::MoEPass>& pass) {
  Tensor h = x + (*attention)((*attention_norm)(x), rope, mask);
  Tensor normed = (*ffn_norm)(h);
  return h + (moe ? (*moe)(normed, pass) : (*feed_forward)(normed));
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const ops::RopeTable& rope,
                                        const attention::BlockMask& mask,
                                        const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache,
                                        int64_t layer) {
  Tensor h = x + (*attention)((*attention_norm)(x), rope, mask, cache, layer);
  Tensor normed = (*ffn_norm)(h);
  return h + (moe ? (*moe)(normed, pass) : (*feed_forward)(normed));
}

// ---- Transformer --------------------------------------------------------------------------------

namespace {

// Validates first: the base allocates the embedding before any block exists.
common::DecoderArgs decoder_args(const ModelArgs& args) {
  args.validate();
  return {.family = "qwen3",
          .vocab_size = args.vocab_size,
          .dim = args.dim,
          .n_layers = args.n_layers,
          .head_dim = args.head_dim,
          .max_seq_len = args.max_seq_len,
          .norm = {.eps = args.norm_eps},
          .rope_theta = args.rope_theta,
          .tie_embeddings = args.tie_embeddings};
}

}  // namespace

Transformer::Transformer(const ModelArgs& args, TensorOptions opts, common::AttentionKernel kernel)
    : Decoder(decoder_args(args), opts, kernel,
              [&](int64_t i) { return std::make_shared<TransformerBlock>(i, args, opts, kernel); }),
      args_(args),
      moe_stack_(common::MoeStack::layers_of(*layers), args.aux_loss_coeff, args.load_balance_loss,
                 args.moe && args.moe->capacity_factor > 0) {}

Tensor Transformer::forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) {
  std::shared_ptr<nn::moe::MoEPass> pass = moe_stack_.new_pass(false);
  return common::run_blocks(
      *layers, first, last, h,
      [this, mask, pass](TransformerBlock& block, const Tensor& x) { return block(x, rope(), mask, pass); },
      [pass](TransformerBlock& block) { return common::MoeStack::take_loop_reports(block.moe.get(), pass); },
      [pass](TransformerBlock& block, std::vector<Tensor> reports) {
        common::MoeStack::give_loop_reports(block.moe.get(), pass, std::move(reports));
      });
}

Tensor Transformer::forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) {
  // Inference adds no auxiliary loss; the pass only carries the MoE layers' reports.
  std::shared_ptr<nn::moe::MoEPass> pass = moe_stack_.new_pass(true);
  Tensor out = h;
  int64_t layer = 0;
  for (const auto& block : *layers) out = (*block)(out, rope(), mask, pass, cache, layer++);
  return out;
}

Tensor Transformer::auxiliary_loss() { return moe_stack_.auxiliary_loss(); }
NamedScalars Transformer::end_step() { return moe_stack_.end_step(); }
std::vector<Tensor> Transformer::take_step_records() { return moe_stack_.take_step_records(); }
void Transformer::put_step_records(std::vector<Tensor> records) { moe_stack_.put_step_records(std::move(records)); }

}  // namespace titan::models::qwen3
