#include "titan/models/common/decoder.h"

#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/nn/init.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"

namespace titan::models::common {

DecoderBase::DecoderBase(const DecoderArgs& args, TensorOptions opts, AttentionKernel kernel)
    : args_(args), kernel_(kernel) {
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<nn::Embedding>(args_.vocab_size, args_.dim, opts));
}

void DecoderBase::add_head(TensorOptions opts) {
  norm = register_module("norm", make_norm(args_.dim, args_.norm, opts));
  if (!args_.tie_embeddings)
    output =
        register_module("output", std::make_shared<nn::Linear>(args_.dim, args_.vocab_size, false, opts));
  rope_ = args_.rope_table ? *args_.rope_table
                           : ops::RopeTable::build(args_.head_dim, args_.max_seq_len, args_.rope_theta,
                                                   args_.rope_scaling);
  rope_.cos = register_buffer("rope_cos", rope_.cos, false);
  rope_.sin = register_buffer("rope_sin", rope_.sin, false);
}

Tensor DecoderBase::forward(const Tensor& tokens, const Tensor& document_ids) {
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) <= args_.max_seq_len, args_.family,
              " Transformer: expected tokens [batch, seq] with seq <= max_seq_len (", args_.max_seq_len,
              "), got ", tokens.desc(), "; build the model with a larger max_seq_len");
  return forward_layers(tokens, document_ids, Tensor(), 0, args_.n_layers);
}

Tensor DecoderBase::forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden,
                                   int64_t first, int64_t last) {
  check_layer_span(tokens, hidden, first, last, args_.n_layers, args_.max_seq_len, args_.family.c_str());
  const auto mask = layer_mask(tokens, document_ids, kernel_);
  Tensor h = first == 0 ? embed(tokens) : hidden;
  h = forward_blocks(h, first, last, mask);
  return last == args_.n_layers ? logits(h) : h;
}

Tensor DecoderBase::forward_cached(const Tensor& tokens, KVCache& cache) {
  autograd::NoGradGuard no_grad;
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && cache.reach(tokens.size(1)) <= args_.max_seq_len,
              args_.family, " Transformer::forward_cached: expected tokens [batch, seq >= 1] reaching no further "
              "than max_seq_len (", args_.max_seq_len, ") from the cache's position, got ", tokens.desc(),
              " reaching ", cache.reach(tokens.dim() == 2 ? tokens.size(1) : 1),
              "; the model has no positions beyond its max_seq_len");
  // Read only when the tokens start the sequence (see Attention::forward_cached); for one token
  // it is a single tile.
  const auto mask = layer_mask(tokens, Tensor(), kernel_);
  Tensor h = forward_blocks_cached(embed(tokens), mask, cache);
  cache.advance(tokens.size(1));
  return logits(h);
}

Tensor DecoderBase::embed(const Tensor& tokens) {
  const Tensor h = (*tok_embeddings)(tokens);
  return args_.embedding_scale == 1.0 ? h : h * args_.embedding_scale;
}

Tensor DecoderBase::logits(const Tensor& h) {
  Tensor normed = (*norm)(h);
  Tensor out = output ? (*output)(normed) : ops::linear(normed, tok_embeddings->weight);
  if (args_.logits_scale != 1.0) out = out * args_.logits_scale;
  return args_.final_softcap ? ops::softcap(out, *args_.final_softcap) : out;
}

void DecoderBase::reset_parameters(Generator& gen) {
  const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
  nn::init::trunc_normal_(output ? output->weight : tok_embeddings->weight, 0.0, std, -3 * std, 3 * std, gen);
}

}  // namespace titan::models::common
