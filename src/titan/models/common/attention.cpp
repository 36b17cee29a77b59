#include "titan/models/common/attention.h"

#include "titan/attention/decode.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/models/common/init.h"

namespace titan::models::common {

attention::BlockMask layer_mask(const Tensor& tokens, const Tensor& document_ids,
                                const AttentionKernel& kernel) {
  attention::Mask rule = attention::Mask::causal();
  if (document_ids.defined()) {
    TITAN_CHECK(kernel.splash,
                "document masking needs splash attention (model.attention = \"splash\"); the "
                "reference path is causal only");
    rule = rule & attention::Mask::document(document_ids);
  }
  // Built per forward: for these rules it is microseconds next to the layers.
  return attention::BlockMask::build(rule, tokens.size(0), tokens.size(1), kernel.block_q, kernel.block_kv);
}

void check_layer_span(const Tensor& tokens, const Tensor& hidden, int64_t first, int64_t last, int64_t n_layers,
                      int64_t max_seq_len, const char* family) {
  TITAN_CHECK(0 <= first && first <= last && last <= n_layers, family, " Transformer: layers [", first, ", ",
              last, ") are not a span of its ", n_layers, " layers");
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) <= max_seq_len, family,
              " Transformer: expected tokens [batch, seq] with seq <= max_seq_len (", max_seq_len, "), got ",
              tokens.desc(), "; build the model with a larger max_seq_len");
  TITAN_CHECK(hidden.defined() == (first > 0) &&
                  (!hidden.defined() || (hidden.dim() == 3 && hidden.size(0) == tokens.size(0))),
              family, " Transformer: layers [", first, ", ", last, ") take ",
              first > 0 ? "the hidden states [batch, seq, dim] of the layers before them"
                        : "no hidden states (they start at the embedding)",
              ", got ", hidden.defined() ? hidden.desc() : std::string("none"), " for tokens ", tokens.desc());
}

Attention::Attention(const AttentionArgs& args, double init_std, TensorOptions opts, AttentionKernel kernel)
    : head_dim_(args.head_dim),
      rope_layout_(args.rope_layout),
      qk_norm_full_width_(args.qk_norm_full_width),
      scale_(args.scale),
      softcap_(args.softcap),
      sliding_window_(args.sliding_window),
      init_std_(init_std),
      kernel_(kernel) {
  TITAN_CHECK(args.sliding_window >= 0, "Attention: sliding_window must be 0 (none) or positive, got ",
              args.sliding_window);
  const int64_t q_dim = args.n_heads * head_dim_, kv_dim = args.n_kv_heads * head_dim_;
  wq = register_module("wq", std::make_shared<nn::Linear>(args.dim, q_dim, args.qkv_bias, opts));
  wk = register_module("wk", std::make_shared<nn::Linear>(args.dim, kv_dim, args.qkv_bias, opts));
  wv = register_module("wv", std::make_shared<nn::Linear>(args.dim, kv_dim, args.qkv_bias, opts));
  wo = register_module("wo", std::make_shared<nn::Linear>(q_dim, args.dim, args.out_bias, opts));
  if (args.qk_norm_eps) {
    const int64_t q_width = args.qk_norm_full_width ? q_dim : head_dim_,
                  k_width = args.qk_norm_full_width ? kv_dim : head_dim_;
    q_norm = register_module(
        "q_norm", std::make_shared<nn::RMSNorm>(q_width, *args.qk_norm_eps, opts, args.qk_norm_unit_offset));
    k_norm = register_module(
        "k_norm", std::make_shared<nn::RMSNorm>(k_width, *args.qk_norm_eps, opts, args.qk_norm_unit_offset));
  }
}

Attention::Qkv Attention::project(const Tensor& x, const ops::RopeTable& rope, const Tensor& start_pos) {
  const int64_t B = x.size(0), S = x.size(1);
  Tensor q = (*wq)(x), k = (*wk)(x);
  if (q_norm && qk_norm_full_width_) {
    q = (*q_norm)(q);
    k = (*k_norm)(k);
  }
  q = q.view({B, S, -1, head_dim_});
  k = k.view({B, S, -1, head_dim_});
  Tensor v = (*wv)(x).view({B, S, -1, head_dim_});
  if (q_norm && !qk_norm_full_width_) {
    q = (*q_norm)(q);
    k = (*k_norm)(k);
  }
  if (start_pos.defined()) {
    q = ops::rope(q, rope, rope_layout_, start_pos);
    k = ops::rope(k, rope, rope_layout_, start_pos);
  } else {
    q = ops::rope(q, rope, rope_layout_);
    k = ops::rope(k, rope, rope_layout_);
  }
  return {q, k, v};
}

Tensor Attention::attend(const Qkv& qkv, const attention::BlockMask& mask) const {
  if (kernel_.splash)
    return attention::splash_attention(qkv.q, qkv.k, qkv.v, mask, {.scale = scale_, .softcap = softcap_});
  TITAN_CHECK(sliding_window_ == 0, "the reference attention path is causal only; ", path(),
              " has a sliding window of ", sliding_window_, ": use model.attention = \"splash\"");
  return attention::attention_reference(qkv.q, qkv.k, qkv.v, {.scale = scale_, .softcap = softcap_});
}

Tensor Attention::forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
  const int64_t B = x.size(0), S = x.size(1);
  const Qkv qkv = project(x, rope, Tensor());
  const Tensor out = attend_override_ ? attend_override_(qkv.q, qkv.k, qkv.v) : attend(qkv, mask);
  return (*wo)(out.view({B, S, -1}));
}

Tensor Attention::forward_cached(const Tensor& x, const ops::RopeTable& rope,
                                 const attention::BlockMask& mask, KVCache& cache, int64_t layer) {
  const int64_t B = x.size(0), S = x.size(1);
  const bool starts = cache.starts_sequence();
  const Tensor start = cache.position();
  Qkv qkv = project(x, rope, start);
  auto [keys, values] = cache.append(layer, qkv.k, qkv.v);
  // A prompt that starts the sequence computes what training computes, with the same kernel (and
  // with splash, no [S, S] scores); later tokens read the keys before them from the cache.
  Tensor out = starts ? attend(qkv, mask)
                      : attention::decode_attention(
                            qkv.q, keys, values, start,
                            {.scale = scale_,
                             .softcap = softcap_,
                             .window_left = sliding_window_ > 0 ? std::optional<int64_t>(sliding_window_ - 1)
                                                                : std::nullopt});
  return (*wo)(out.view({B, S, -1}));
}

void Attention::reset_parameters(Generator& gen) {
  for (const auto& w : {wq, wk, wv}) trunc_normal(w->weight, kInitStd, gen);
  trunc_normal(wo->weight, init_std_, gen);
  for (const auto& w : {wq, wk, wv, wo})
    if (w->bias.defined()) nn::init::zeros_(w->bias);
}

}  // namespace titan::models::common
