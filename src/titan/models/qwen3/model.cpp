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
      args_(args) {}

Tensor Transformer::forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) {
  std::shared_ptr<nn::moe::MoEPass> pass = new_pass();
  Tensor out = common::run_blocks(
      *layers, first, last, h,
      [this, mask, pass](TransformerBlock& block, const Tensor& x) { return block(x, rope(), mask, pass); },
      [pass](TransformerBlock& block) {
        return block.moe ? block.moe->take_loop_reports(*pass) : std::vector<Tensor>{};
      },
      [pass](TransformerBlock& block, std::vector<Tensor> reports) {
        if (block.moe) block.moe->give_loop_reports(*pass, std::move(reports));
      });
  last_pass_ = pass;
  return out;
}

Tensor Transformer::forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) {
  // Inference adds no auxiliary loss; the pass only carries the MoE layers' reports.
  std::shared_ptr<nn::moe::MoEPass> pass = new_pass();
  if (pass) pass->aux_loss_weight = 0;
  Tensor out = h;
  int64_t layer = 0;
  for (const auto& block : *layers) out = (*block)(out, rope(), mask, pass, cache, layer++);
  return out;
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

}  // namespace titan::models::qwen3
