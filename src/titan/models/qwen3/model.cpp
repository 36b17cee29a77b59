#include "titan/models/qwen3/model.h"

#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/models/common/init.h"
#include "titan/models/common/run_blocks.h"
#include "titan/nn/init.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"

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

Transformer::Transformer(const ModelArgs& args, TensorOptions opts, common::AttentionKernel kernel)
    : args_(args), kernel_(kernel) {
  args_.validate();
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<nn::Embedding>(args_.vocab_size, args_.dim, opts));
  layers = register_module("layers", std::make_shared<nn::ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < args_.n_layers; ++i)
    layers->push_back(std::make_shared<TransformerBlock>(i, args_, opts, kernel_));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(args_.dim, args_.norm_eps, opts));
  if (!args_.tie_embeddings)
    output =
        register_module("output", std::make_shared<nn::Linear>(args_.dim, args_.vocab_size, false, opts));
  rope_ = ops::RopeTable::build(args_.head_dim, args_.max_seq_len, args_.rope_theta);
  rope_.cos = register_buffer("rope_cos", rope_.cos, false);
  rope_.sin = register_buffer("rope_sin", rope_.sin, false);
}

Tensor Transformer::forward(const Tensor& tokens, const Tensor& document_ids) {
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) <= args_.max_seq_len,
              "qwen3 Transformer: expected tokens [batch, seq] with seq <= max_seq_len (", args_.max_seq_len,
              "), got ", tokens.desc(), "; build the model with a larger max_seq_len");
  return forward_layers(tokens, document_ids, Tensor(), 0, args_.n_layers);
}

Tensor Transformer::forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden,
                                   int64_t first, int64_t last) {
  common::check_layer_span(tokens, hidden, first, last, args_.n_layers, args_.max_seq_len, "qwen3");
  const auto mask = common::layer_mask(tokens, document_ids, kernel_);
  std::shared_ptr<nn::moe::MoEPass> pass = new_pass();
  Tensor h = first == 0 ? (*tok_embeddings)(tokens) : hidden;
  h = common::run_blocks(*layers, first, last, h, [this, mask, pass](TransformerBlock& block, const Tensor& x) {
    return block(x, rope_, mask, pass);
  });
  last_pass_ = pass;
  return last == args_.n_layers ? logits(h) : h;
}

std::shared_ptr<nn::moe::MoEPass> Transformer::new_pass() const {
  if (!args_.moe) return nullptr;
  auto pass = std::make_shared<nn::moe::MoEPass>();
  pass->load_balance_loss = args_.load_balance_loss;
  pass->aux_loss_weight = args_.load_balance_loss == nn::moe::LoadBalanceLoss::global
                              ? args_.aux_loss_coeff
                              : args_.aux_loss_coeff / static_cast<double>(args_.n_layers);
  return pass;
}

Tensor Transformer::logits(const Tensor& h) {
  Tensor normed = (*norm)(h);
  return output ? (*output)(normed) : ops::linear(normed, tok_embeddings->weight);
}

Tensor Transformer::forward_cached(const Tensor& tokens, KVCache& cache) {
  autograd::NoGradGuard no_grad;
  TITAN_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && cache.reach(tokens.size(1)) <= args_.max_seq_len,
              "qwen3 Transformer::forward_cached: expected tokens [batch, seq >= 1] reaching no further than "
              "max_seq_len (", args_.max_seq_len, ") from the cache's position, got ", tokens.desc(), " reaching ",
              cache.reach(tokens.dim() == 2 ? tokens.size(1) : 1), "; the model has no positions beyond its max_seq_len");
  const auto mask = common::layer_mask(tokens, Tensor(), kernel_);
  // Inference adds no auxiliary loss; the pass only carries the MoE layers' reports.
  std::shared_ptr<nn::moe::MoEPass> pass = new_pass();
  if (pass) pass->aux_loss_weight = 0;
  Tensor h = (*tok_embeddings)(tokens);
  int64_t layer = 0;
  for (const auto& block : *layers) h = (*block)(h, rope_, mask, pass, cache, layer++);
  cache.advance(tokens.size(1));
  return logits(h);
}

Tensor Transformer::auxiliary_loss() {
  if (!last_pass_ || last_pass_->aux_loss_weight == 0) return Tensor();
  return last_pass_->aux_losses.total();
}

NamedScalars Transformer::end_step() {
  if (!args_.moe) return {};
  std::vector<std::vector<int64_t>> counts;
  NamedScalars dropped_by_layer;
  int64_t routed = 0, dropped = 0;
  for (size_t l = 0; l < layers->size(); ++l) {
    nn::moe::MoE& moe = *(*layers)[l].moe;
    std::vector<int64_t> layer_counts = moe.end_step();
    int64_t layer_routed = 0;
    for (int64_t c : layer_counts) layer_routed += c;
    // A layer of another pipeline stage runs on another rank.
    if (layer_routed == 0) continue;
    routed += layer_routed;
    counts.push_back(std::move(layer_counts));
    dropped += moe.dropped();
    if (moe.dropped() > 0)
      dropped_by_layer.emplace_back("moe/dropped_layer" + std::to_string(l), static_cast<double>(moe.dropped()));
  }
  if (routed == 0) return {};  // no training forward since the last step
  const nn::moe::ExpertLoad load = nn::moe::expert_load(counts);
  NamedScalars out{{"moe/tokens_min", static_cast<double>(load.min)},
                   {"moe/tokens_max", static_cast<double>(load.max)},
                   {"moe/tokens_cv", load.cv}};
  // Only a capped layer drops, so a dropless run's line stays as it was.
  if (args_.moe->capacity_factor > 0 || dropped > 0) {
    out.emplace_back("moe/dropped", static_cast<double>(dropped));
    out.insert(out.end(), dropped_by_layer.begin(), dropped_by_layer.end());
  }
  return out;
}

std::vector<Tensor> Transformer::take_step_records() {
  std::vector<Tensor> out;
  records_per_layer_.clear();
  if (!args_.moe) return out;
  for (const auto& layer : *layers) {
    std::vector<Tensor> r = layer->moe->take_records();
    records_per_layer_.push_back(r.size());
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

void Transformer::put_step_records(std::vector<Tensor> records) {
  size_t expected = 0;
  for (size_t n : records_per_layer_) expected += n;
  TITAN_CHECK(records.size() == expected, "qwen3 Transformer::put_step_records: ", records.size(),
              " records where take_step_records gave ", expected);
  size_t at = 0;
  for (size_t l = 0; l < records_per_layer_.size(); ++l) {
    const auto first = records.begin() + static_cast<std::ptrdiff_t>(at);
    (*layers)[l].moe->put_records({first, first + static_cast<std::ptrdiff_t>(records_per_layer_[l])});
    at += records_per_layer_[l];
  }
}

void Transformer::reset_parameters(Generator& gen) {
  const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
  nn::init::trunc_normal_(output ? output->weight : tok_embeddings->weight, 0.0, std, -3 * std, 3 * std, gen);
}

}  // namespace titan::models::qwen3
