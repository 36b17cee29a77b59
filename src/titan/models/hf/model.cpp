#include "titan/models/hf/model.h"

#include <map>

#include "titan/models/common/init.h"
#include "titan/models/common/run_blocks.h"
#include "titan/ops/arith.h"

namespace titan::models::hf {

namespace {

common::AttentionArgs attention_args(const DecoderSpec& s, const LayerSpec& layer) {
  return {.dim = s.dim,
          .n_heads = s.n_heads,
          .n_kv_heads = s.n_kv_heads,
          .head_dim = s.head_dim,
          .rope_layout = ops::RopeLayout::rotate_half,
          .qk_norm_eps = s.qk_norm == DecoderSpec::QkNorm::none ? std::nullopt : std::optional<double>(s.norm.eps),
          .qk_norm_full_width = s.qk_norm == DecoderSpec::QkNorm::full_width,
          .qk_norm_unit_offset = s.norm.unit_offset,
          .qkv_bias = s.qkv_bias,
          .out_bias = s.out_bias,
          .scale = s.attention_scale,
          .softcap = s.attention_softcap,
          .sliding_window = layer.sliding_window};
}

}  // namespace

// ---- TransformerBlock ---------------------------------------------------------------------------

TransformerBlock::TransformerBlock(int64_t layer_id, const DecoderSpec& spec, TensorOptions opts,
                                   common::AttentionKernel kernel)
    : residual_(spec.residual), residual_scale_(spec.residual_scale) {
  const double init_std = common::depth_init_std(layer_id);
  attention = register_module("attention", std::make_shared<common::Attention>(
                                               attention_args(spec, spec.layers[static_cast<size_t>(layer_id)]),
                                               init_std, opts, kernel));
  if (spec.moe)
    moe = register_module("moe", std::make_shared<nn::moe::MoE>(layer_id, spec.dim, *spec.moe, init_std, opts));
  else
    feed_forward = register_module("feed_forward", std::make_shared<common::FeedForward>(
                                                       spec.dim, spec.ffn_dim, init_std, opts, spec.feed_forward));
  auto norm = [&](const char* name) { return register_module(name, common::make_norm(spec.dim, spec.norm, opts)); };
  if (residual_ != Residual::post_norm) {
    attention_norm = norm("attention_norm");
    ffn_norm = norm("ffn_norm");
  }
  if (residual_ == Residual::sandwich || residual_ == Residual::post_norm) {
    post_attention_norm = norm("post_attention_norm");
    post_ffn_norm = norm("post_ffn_norm");
  }
}

Tensor TransformerBlock::around(const Tensor& x, const std::function<Tensor(const Tensor&)>& attend,
                                const std::shared_ptr<nn::moe::MoEPass>& pass) {
  auto scaled = [this](const Tensor& t) { return residual_scale_ == 1.0 ? t : t * residual_scale_; };
  auto ffn = [&](const Tensor& t) { return moe ? (*moe)(t, pass) : (*feed_forward)(t); };
  switch (residual_) {
    case Residual::pre_norm: {
      const Tensor h = x + scaled(attend((*attention_norm)(x)));
      return h + scaled(ffn((*ffn_norm)(h)));
    }
    case Residual::sandwich: {
      const Tensor h = x + scaled((*post_attention_norm)(attend((*attention_norm)(x))));
      return h + scaled((*post_ffn_norm)(ffn((*ffn_norm)(h))));
    }
    case Residual::post_norm: {
      const Tensor h = x + scaled((*post_attention_norm)(attend(x)));
      return h + scaled((*post_ffn_norm)(ffn(h)));
    }
    case Residual::parallel:
      return x + scaled(attend((*attention_norm)(x))) + scaled(ffn((*ffn_norm)(x)));
  }
  throw Error("hf TransformerBlock: unknown residual layout");
}

Tensor TransformerBlock::forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                                 const std::shared_ptr<nn::moe::MoEPass>& pass) {
  return around(x, [&](const Tensor& in) { return (*attention)(in, rope, mask); }, pass);
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const ops::RopeTable& rope,
                                        const attention::BlockMask& mask,
                                        const std::shared_ptr<nn::moe::MoEPass>& pass, KVCache& cache,
                                        int64_t layer) {
  return around(x, [&](const Tensor& in) { return (*attention)(in, rope, mask, cache, layer); }, pass);
}

// ---- Transformer --------------------------------------------------------------------------------

namespace {

common::DecoderArgs decoder_args(const DecoderSpec& s, int64_t max_seq_len) {
  TITAN_CHECK(max_seq_len > 0, "hf Transformer: max_seq_len must be positive, got ", max_seq_len);
  return {.family = s.model_type,
          .vocab_size = s.vocab_size,
          .dim = s.dim,
          .n_layers = s.n_layers,
          .head_dim = s.head_dim,
          .max_seq_len = max_seq_len,
          .norm = s.norm,
          .rope_table = ops::RopeTable::build(s.ropes.at(0), max_seq_len),
          .tie_embeddings = s.tie_embeddings,
          .embedding_scale = s.embedding_scale,
          .logits_scale = s.logits_scale,
          .final_softcap = s.final_softcap};
}

}  // namespace

Transformer::Transformer(const DecoderSpec& spec, int64_t max_seq_len, TensorOptions opts,
                         common::AttentionKernel kernel)
    : Decoder(decoder_args(spec, max_seq_len), opts, kernel,
              [&](int64_t i) { return std::make_shared<TransformerBlock>(i, spec, opts, kernel); }),
      spec_(spec),
      // transformers' Mixtral pools its load-balancing loss over every layer's tokens.
      moe_stack_(common::MoeStack::layers_of(*layers), spec.aux_loss_coeff, nn::moe::LoadBalanceLoss::global,
                 spec.moe && spec.moe->capacity_factor > 0) {
  ropes_.push_back(rope());
  for (size_t r = 1; r < spec.ropes.size(); ++r) {
    ops::RopeTable t = ops::RopeTable::build(spec.ropes[r], max_seq_len);
    t.cos = register_buffer("rope_" + std::to_string(r) + "_cos", t.cos, false);
    t.sin = register_buffer("rope_" + std::to_string(r) + "_sin", t.sin, false);
    ropes_.push_back(t);
  }
}

const ops::RopeTable& Transformer::layer_rope(size_t i) const {
  // The first table is the base's, which context parallelism may have cut to this rank's rows.
  const size_t r = spec_.layers[i].rope;
  return r == 0 ? rope() : ropes_[r];
}

std::map<int64_t, attention::BlockMask> Transformer::layer_masks(const attention::BlockMask& mask) const {
  std::map<int64_t, attention::BlockMask> masks{{0, mask}};
  for (const LayerSpec& l : spec_.layers)
    if (!masks.count(l.sliding_window))
      masks.emplace(l.sliding_window,
                    attention::BlockMask::build(mask.mask() & attention::Mask::sliding_window(l.sliding_window - 1),
                                                mask.batch(), mask.seq(), mask.block_q(), mask.block_kv()));
  return masks;
}

Tensor Transformer::forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) {
  std::shared_ptr<nn::moe::MoEPass> pass = moe_stack_.new_pass(false);
  const std::map<int64_t, attention::BlockMask> masks = layer_masks(mask);
  Tensor out = h;
  // Runs of layers of one kind: a graph-mode loop runs one block's code on every layer it holds.
  for (int64_t a = first; a < last;) {
    int64_t b = a + 1;
    while (b < last && spec_.same_kind(static_cast<size_t>(a), static_cast<size_t>(b))) ++b;
    const attention::BlockMask run_mask = masks.at(spec_.layers[static_cast<size_t>(a)].sliding_window);
    const ops::RopeTable* table = &layer_rope(static_cast<size_t>(a));
    out = common::run_blocks(
        *layers, a, b, out,
        [run_mask, table, pass](TransformerBlock& block, const Tensor& x) { return block(x, *table, run_mask, pass); },
        [pass](TransformerBlock& block) { return common::MoeStack::take_loop_reports(block.moe.get(), pass); },
        [pass](TransformerBlock& block, std::vector<Tensor> reports) {
          common::MoeStack::give_loop_reports(block.moe.get(), pass, std::move(reports));
        });
    a = b;
  }
  return out;
}

Tensor Transformer::forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) {
  const std::shared_ptr<nn::moe::MoEPass> pass = moe_stack_.new_pass(true);
  const std::map<int64_t, attention::BlockMask> masks = layer_masks(mask);
  Tensor out = h;
  for (size_t i = 0; i < layers->size(); ++i) {
    out = (*layers)[i](out, layer_rope(i), masks.at(spec_.layers[i].sliding_window), pass, cache,
                       static_cast<int64_t>(i));
  }
  return out;
}

}  // namespace titan::models::hf
