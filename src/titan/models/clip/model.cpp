#include "titan/models/clip/model.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/models/common/dense_attention.h"
#include "titan/ops/arith.h"
#include "titan/ops/embedding.h"

namespace titan::models::clip {

namespace {

// transformers' legacy eos_token_id, under which the largest id's position is pooled.
constexpr int64_t kLegacyEos = 2;

common::NormArgs norm_args(const ModelArgs& a) {
  return {.kind = common::NormArgs::Kind::layer, .eps = a.norm_eps, .bias = true};
}

common::EncoderBlockArgs block_args(const ModelArgs& a) {
  return {.dim = a.dim,
          .n_heads = a.n_heads,
          .head_dim = a.head_dim(),
          .attention_bias = true,
          .scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim())),
          .norm = norm_args(a),
          .ffn_dim = a.ffn_dim,
          .feed_forward = {.activation = a.activation, .gated = false, .bias = true}};
}

}  // namespace

ClipTextModel::ClipTextModel(const ModelArgs& args, TensorOptions opts) : args_(args) {
  args.validate();
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<nn::Embedding>(args.vocab_size, args.dim, opts));
  pos_embeddings =
      register_module("pos_embeddings", std::make_shared<nn::Embedding>(args.max_positions, args.dim, opts));
  layers = register_module("layers", std::make_shared<nn::ModuleList<common::EncoderBlock>>());
  for (int64_t i = 0; i < args.n_layers; ++i)
    layers->push_back(std::make_shared<common::EncoderBlock>(block_args(args), opts));
  norm = register_module("norm", common::make_norm(args.dim, norm_args(args), opts));
}

std::vector<int64_t> ClipTextModel::pooled_positions(const Tensor& ids) const {
  TITAN_CHECK(ids.dim() == 2 && ids.size(1) > 0 && (ids.dtype() == kI32 || ids.dtype() == kI64),
              "clip text model: expected token ids i32 or i64 [batch, seq] with seq > 0, got ", ids.desc());
  const int64_t batch = ids.size(0), seq = ids.size(1);
  const std::vector<int64_t> v = ids.to(kI64).to_vector<int64_t>();
  std::vector<int64_t> out(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* row = v.data() + b * seq;
    const int64_t* end = row + seq;
    if (args_.eos_token_id == kLegacyEos) {
      out[b] = std::max_element(row, end) - row;  // the first of equal maxima, as torch's argmax
    } else {
      const int64_t* eos = std::find(row, end, args_.eos_token_id);
      out[b] = eos == end ? 0 : eos - row;
    }
  }
  return out;
}

ClipTextOutput ClipTextModel::forward(const Tensor& ids, const Tensor& attention_mask) {
  const std::vector<int64_t> pooled = pooled_positions(ids);
  const int64_t batch = ids.size(0), seq = ids.size(1);
  TITAN_CHECK(seq <= args_.max_positions, "clip text model: ", seq,
              " token ids per row, but the position table (", "max_position_embeddings) has ",
              args_.max_positions, "; truncate the ids to ", args_.max_positions);
  TITAN_CHECK(!attention_mask.defined() || attention_mask.sizes() == ids.sizes(),
              "clip text model: attention mask ", attention_mask.desc(), " and token ids ", ids.desc(),
              " must have one shape");
  ClipTextOutput out;
  // Through the root's hooks (FSDP gathers the root unit, each block's hooks that block); the
  // pooling after it reads no parameter.
  out.last_hidden_state = run_forward([&] {
    Tensor h = (*tok_embeddings)(ids) + (*pos_embeddings)(Tensor::arange(seq));
    const Tensor mask = common::attention_bias(attention_mask, seq, true, h.dtype());
    for (size_t i = 0; i < layers->size(); ++i) h = (*layers)[i](h, mask);
    return (*norm)(h);
  });
  // Row b * seq + pooled[b] of the states as one table: the embedding op is the row gather, and
  // its backward scatters into the states' gradient.
  std::vector<int64_t> rows(pooled.size());
  for (int64_t b = 0; b < batch; ++b) rows[b] = b * seq + pooled[b];
  out.pooler_output = ops::embedding(Tensor::from_vector<int64_t>(rows, {batch}),
                                     out.last_hidden_state.reshape({batch * seq, args_.dim}));
  return out;
}

}  // namespace titan::models::clip
