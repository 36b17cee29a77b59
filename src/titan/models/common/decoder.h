#pragma once
// The decoder-only transformer's skeleton, held once for every family built on it (TorchTitan's
// models/common/decoder.py): token embedding, a stack of blocks, final RMSNorm, output projection
// (or the embedding, tied), RoPE tables, and the forwards CausalLM asks for. A family states its
// block, how a forward calls it, and its extras (Qwen 3's MoE pass, Llama 3's RoPE scaling).
//
// DecoderBase is what the forwards and parallelize_decoder (common/parallelize.h) compile against
// once; Decoder<Block> only adds the typed `layers` a family's code and its plans walk.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/models/causal_lm.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/norm_args.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::common {

// The sizes the skeleton is built from; a family maps its own args onto them.
struct DecoderArgs {
  std::string family;  // "llama3": how errors name the model
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t head_dim = 0;     // the RoPE tables' width
  int64_t max_seq_len = 0;  // positions the RoPE tables cover
  NormArgs norm = {};       // the final norm's
  double rope_theta = 10000;
  std::optional<ops::RopeScaling> rope_scaling = std::nullopt;
  // Set: the table itself, built by the family (any RoPE type); head_dim, rope_theta and
  // rope_scaling are then not read.
  std::optional<ops::RopeTable> rope_table = std::nullopt;
  bool tie_embeddings = false;  // the output projection is the token embedding
  // What the embedding's output is multiplied by (Gemma's sqrt(dim), Granite's
  // embedding_multiplier) and the logits are (Granite's 1 / logits_scaling).
  double embedding_scale = 1.0;
  double logits_scale = 1.0;
  // Gemma 2's final logit soft-capping: logits become cap * tanh(logits / cap).
  std::optional<double> final_softcap = std::nullopt;
};

class DecoderBase : public CausalLM {
 public:
  // tokens [B, S] (i32/i64), S <= max_seq_len -> logits [B, S, vocab_size].
  // With document_ids [B, S] defined, a token attends only within its document.
  Tensor forward(const Tensor& tokens, const Tensor& document_ids = {});
  Tensor operator()(const Tensor& tokens, const Tensor& document_ids) override {
    return run_forward(tokens, [this, document_ids](const Tensor& in) { return forward(in, document_ids); });
  }
  using CausalLM::operator();
  Tensor forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden, int64_t first,
                        int64_t last) override;
  // tokens [B, S] at positions [cache.position(), + S), within max_seq_len.
  Tensor forward_cached(const Tensor& tokens, KVCache& cache) override;

  int64_t num_layers() const override { return args_.n_layers; }
  int64_t hidden_size() const override { return args_.dim; }
  int64_t vocab_size() const override { return args_.vocab_size; }
  int64_t max_seq_len() const override { return args_.max_seq_len; }
  const std::string& family() const { return args_.family; }

  // TorchTitan's final projection: truncated normal with std dim^-0.5, cut at 3 std. Tied, that
  // is the embedding's init too: the projection's scale is the one that sets the first loss.
  // (The embedding's normal(0, 1) and the norms' ones are those modules' own defaults.)
  void reset_parameters(Generator& gen) override;

  // What the parallel plans wrap without knowing the block type: the stack as one module (its
  // children are the blocks) and every block's attention (context parallelism swaps its kernel).
  virtual nn::Module& blocks() = 0;
  virtual std::vector<Attention*> attentions() = 0;

  std::shared_ptr<nn::Embedding> tok_embeddings;
  std::shared_ptr<nn::Norm> norm;
  std::shared_ptr<nn::Linear> output;  // null when the embeddings are tied

 protected:
  // Registers the embedding; the derived class then registers "layers" and calls add_head(), so
  // that names, state-dict order and initialisation order are TorchTitan's.
  DecoderBase(const DecoderArgs& args, TensorOptions opts, AttentionKernel kernel);
  // The final norm, the output projection (untied) and the RoPE tables, registered as
  // non-persistent buffers: derived, so never saved.
  void add_head(TensorOptions opts);

  // Blocks [first, last) over h, every one under `mask`. Activation checkpointing and graph mode's
  // loop re-run a block's call in backward, so the call holds what it captures by value
  // (run_blocks.h).
  virtual Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) = 0;
  // Every block over h under no-grad, block i appending to cache slot i.
  virtual Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) = 0;

  // The final norm and the output projection (or the embedding, tied) over the last block's h,
  // scaled and soft-capped as DecoderArgs say.
  Tensor logits(const Tensor& h);
  // The token embedding, scaled as DecoderArgs say.
  Tensor embed(const Tensor& tokens);

  const ops::RopeTable& rope() const { return rope_; }
  const DecoderArgs& base_args() const { return args_; }

 private:
  DecoderArgs args_;
  AttentionKernel kernel_;
  ops::RopeTable rope_;
};

// A decoder whose stack holds `Block`s, each with an `attention` (common::Attention).
template <class Block>
class Decoder : public DecoderBase {
 public:
  nn::Module& blocks() override { return *layers; }
  std::vector<Attention*> attentions() override {
    std::vector<Attention*> out;
    for (const auto& block : *layers) out.push_back(block->attention.get());
    return out;
  }

  std::shared_ptr<nn::ModuleList<Block>> layers;

 protected:
  // make_block(i) builds block i of args.n_layers.
  Decoder(const DecoderArgs& args, TensorOptions opts, AttentionKernel kernel,
          const std::function<std::shared_ptr<Block>(int64_t layer_id)>& make_block)
      : DecoderBase(args, opts, kernel) {
    layers = register_module("layers", std::make_shared<nn::ModuleList<Block>>());
    for (int64_t i = 0; i < args.n_layers; ++i) layers->push_back(make_block(i));
    add_head(opts);
  }
};

}  // namespace titan::models::common
