#include "titan/models/t5/model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/core/error.h"
#include "titan/models/common/dense_attention.h"
#include "titan/ops/arith.h"
#include "titan/ops/embedding.h"

namespace titan::models::t5 {

int64_t relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2;
  const int64_t base = relative_position > 0 ? half : 0;
  const int64_t distance = relative_position < 0 ? -relative_position : relative_position;
  const int64_t max_exact = half / 2;
  if (distance < max_exact) return base + distance;
  // float32 throughout, as torch computes it: at distances that fall on a bucket's edge another
  // precision could truncate to the neighbouring bucket.
  const float log_ratio = std::log(static_cast<float>(distance) / static_cast<float>(max_exact));
  const auto log_range = static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
  const auto large =
      max_exact + static_cast<int64_t>(log_ratio / log_range * static_cast<float>(half - max_exact));
  return base + std::min(large, half - 1);
}

Tensor relative_position_buckets(int64_t seq, int64_t num_buckets, int64_t max_distance) {
  std::vector<int64_t> buckets(static_cast<size_t>(seq * seq));
  for (int64_t q = 0; q < seq; ++q)
    for (int64_t k = 0; k < seq; ++k)
      buckets[q * seq + k] = relative_position_bucket(k - q, num_buckets, max_distance);
  return Tensor::from_vector<int64_t>(buckets, {seq, seq});
}

namespace {

common::EncoderBlockArgs block_args(const ModelArgs& a) {
  return {.dim = a.d_model,
          .n_heads = a.n_heads,
          .head_dim = a.d_kv,
          .attention_bias = false,
          .scale = 1.0,
          .norm = {.kind = common::NormArgs::Kind::rms, .eps = a.norm_eps},
          .ffn_dim = a.d_ff,
          .feed_forward = {.activation = common::Activation::gelu_tanh, .gated = true, .bias = false}};
}

}  // namespace

T5Encoder::T5Encoder(const ModelArgs& args, TensorOptions opts) : args_(args) {
  args.validate();
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<nn::Embedding>(args.vocab_size, args.d_model, opts));
  relative_attention_bias = register_module(
      "relative_attention_bias", std::make_shared<nn::Embedding>(args.num_buckets, args.n_heads, opts));
  layers = register_module("layers", std::make_shared<nn::ModuleList<common::EncoderBlock>>());
  for (int64_t i = 0; i < args.n_layers; ++i)
    layers->push_back(std::make_shared<common::EncoderBlock>(block_args(args), opts));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(args.d_model, args.norm_eps, opts));
}

Tensor T5Encoder::position_bias(int64_t seq) {
  const Tensor table = ops::embedding(relative_position_buckets(seq, args_.num_buckets, args_.max_distance),
                                      relative_attention_bias->weight);
  return table.permute({2, 0, 1}).unsqueeze(0);
}

Tensor T5Encoder::forward(const Tensor& ids, const Tensor& attention_mask) {
  TITAN_CHECK(ids.dim() == 2 && ids.size(1) > 0 && (ids.dtype() == kI32 || ids.dtype() == kI64),
              "t5 encoder: expected token ids i32 or i64 [batch, seq] with seq > 0, got ", ids.desc());
  TITAN_CHECK(!attention_mask.defined() || attention_mask.sizes() == ids.sizes(),
              "t5 encoder: attention mask ", attention_mask.desc(), " and token ids ", ids.desc(),
              " must have one shape");
  // Through the root's hooks: FSDP gathers the root unit (embeddings, position bias, final norm)
  // around the call, and each block's hooks gather that block.
  return run_forward([&] {
    const int64_t seq = ids.size(1);
    Tensor h = (*tok_embeddings)(ids);
    Tensor bias = position_bias(seq);
    const Tensor mask = common::attention_bias(attention_mask, seq, false, h.dtype());
    if (mask.defined()) bias = bias + mask;
    for (size_t i = 0; i < layers->size(); ++i) h = (*layers)[i](h, bias);
    return (*norm)(h);
  });
}

}  // namespace titan::models::t5
