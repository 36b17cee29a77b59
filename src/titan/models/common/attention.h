#pragma once
// Grouped-query self-attention with rotary positions, as the Llama-family decoders share it;
// Qwen 3 adds an RMSNorm over each head of q and k (QK-norm) and a head size of its own.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "titan/attention/block_mask.h"
#include "titan/models/kv_cache.h"
#include "titan/nn/linear.h"
#include "titan/nn/norm.h"
#include "titan/ops/rope.h"

namespace titan::models::common {

// The attention kernel of every block ([model] attention, [attention] block_q / block_kv):
// splash attention over a causal BlockMask of block_q x block_kv tiles, or the reference path,
// which materialises the scores and is kept to compare against.
struct AttentionKernel {
  bool splash = true;
  int64_t block_q = attention::kDefaultBlockQ;
  int64_t block_kv = attention::kDefaultBlockKv;
};

struct AttentionArgs {
  int64_t dim = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // dim / n_heads in Llama 3; its own size in Qwen 3
  ops::RopeLayout rope_layout = ops::RopeLayout::rotate_half;
  // Qwen 3's QK-norm: RMSNorm with this eps over each head of q and of k, before RoPE. Unset: none.
  std::optional<double> qk_norm_eps = std::nullopt;
  // OLMo 2's: over all of q's and k's width instead of each head.
  bool qk_norm_full_width = false;
  // Gemma 3's: the QK-norms scale by (1 + weight) (nn::RMSNorm's unit_offset).
  bool qk_norm_unit_offset = false;
  bool qkv_bias = false;  // wq, wk and wv with biases (Qwen 2, Llama's attention_bias)
  bool out_bias = false;  // wo with a bias
  // What q k^T is multiplied by; unset: 1 / sqrt(head_dim).
  std::optional<double> scale = std::nullopt;
  // Gemma 2's attention logit soft-capping: scores become cap * tanh(scores / cap).
  std::optional<double> softcap = std::nullopt;
  // Hugging Face's sliding_window: a query sees itself and the window - 1 keys before it; 0: no
  // window. The training forward's mask says it (the model builds one per window); decoding
  // reads it here.
  int64_t sliding_window = 0;
};

// The mask every layer of a forward shares: causal, and within documents when `document_ids`
// [batch, seq] is defined (splash only: the reference path is causal by construction).
attention::BlockMask layer_mask(const Tensor& tokens, const Tensor& document_ids,
                                const AttentionKernel& kernel);

// Checks a CausalLM::forward_layers call of model `family`: 0 <= first <= last <= n_layers, token
// ids [batch, seq] with seq <= max_seq_len, and hidden states [batch, part of seq, dim] exactly
// when the span does not start at the embedding (first > 0).
void check_layer_span(const Tensor& tokens, const Tensor& hidden, int64_t first, int64_t last, int64_t n_layers,
                      int64_t max_seq_len, const char* family);

class Attention : public nn::Module {
 public:
  // `init_std`: the std of wo at initialisation (depth-scaled per block).
  Attention(const AttentionArgs& args, double init_std, TensorOptions opts = {}, AttentionKernel kernel = {});

  // x [B, S, dim] -> [B, S, dim]. Head counts are read from the projections' output sizes, so a
  // tensor-parallel plan that shards wq/wk/wv by heads leaves this code as it is. `mask` is the
  // causal mask for S tokens (the reference path is causal by construction).
  int64_t head_dim() const { return head_dim_; }
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask);
  // The table is the model's and outlives backward, so a wrapper that re-runs the body there
  // (activation checkpointing) may hold on to it; the mask is this step's, so it is copied (a
  // copy shares the lists).
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
    return run_forward(x,
                       [this, table = &rope, mask](const Tensor& in) { return forward(in, *table, mask); });
  }
  // Inference: x [B, S, dim] at positions [cache.position(), cache.position() + S); appends this
  // layer's keys and values to `cache` (slot `layer`) and attends over all it holds. Tokens that
  // start the sequence run the training kernel (with `mask`, their causal mask); later ones
  // attend over the cache with decode_attention.
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                        KVCache& cache, int64_t layer);
  // Inference runs under no-grad, where a wrapper only calls the body, once: it may capture by
  // reference.
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask,
                    KVCache& cache, int64_t layer) {
    return run_forward(x, [&](const Tensor& in) { return forward_cached(in, rope, mask, cache, layer); });
  }
  // TorchTitan's: wq, wk, wv truncated normal with std 0.02; wo with init_std; QK-norms at 1,
  // biases at 0.
  void reset_parameters(Generator& gen) override;

  // q, k, v [B, S, heads, head_dim], rotated -> [B, S, q heads, head_dim].
  using AttendFn = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;
  // Replaces the configured kernel in training forwards (not forward_cached): how a plan puts
  // attention across ranks (context parallelism's ring attention) without this code knowing.
  // An empty function restores the kernel.
  void set_attend(AttendFn fn) { attend_override_ = std::move(fn); }

  std::shared_ptr<nn::Linear> wq, wk, wv, wo;
  std::shared_ptr<nn::RMSNorm> q_norm, k_norm;  // null without QK-norm
  int64_t sliding_window() const { return sliding_window_; }
  const std::optional<double>& scale() const { return scale_; }
  const std::optional<double>& softcap() const { return softcap_; }
  bool qk_norm_full_width() const { return qk_norm_full_width_; }

 private:
  struct Qkv {
    Tensor q, k, v;  // [B, S, heads, head_dim]
  };
  // The projections of x, q and k normed (QK-norm) and rotated for positions
  // [start_pos, start_pos + S) (start_pos a 0-d i64 tensor; undefined: from 0).
  Qkv project(const Tensor& x, const ops::RopeTable& rope, const Tensor& start_pos);
  // The configured kernel over the q, k and v of the same S tokens.
  Tensor attend(const Qkv& qkv, const attention::BlockMask& mask) const;

  int64_t head_dim_;
  ops::RopeLayout rope_layout_;
  bool qk_norm_full_width_;
  std::optional<double> scale_, softcap_;
  int64_t sliding_window_;
  double init_std_;
  AttentionKernel kernel_;
  AttendFn attend_override_;
};

}  // namespace titan::models::common
