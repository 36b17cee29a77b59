#pragma once
// T5 v1.1's encoder (transformers' T5EncoderModel with feed_forward_proj "gated-gelu"): token
// embedding, pre-norm blocks of self-attention and a gated-GELU feed-forward, a final norm. Norms
// are RMS norms (no mean, no bias); attention scores are q k^T unscaled plus a learned bias per
// head and relative-position bucket, computed once from the first block's table and added in
// every block (T5 folds 1/sqrt(d_kv) into its initialisation of q instead of scaling). Dropout is
// not applied: the encoder runs frozen, as inference.
#include <cstdint>
#include <memory>

#include "titan/models/common/encoder_block.h"
#include "titan/models/t5/model_args.h"
#include "titan/nn/embedding.h"
#include "titan/nn/norm.h"

namespace titan::models::t5 {

// The bucket of key position k seen from query position q (relative_position = k - q), as
// transformers' T5Attention._relative_position_bucket with bidirectional=True: half the buckets
// for keys after the query, half for the rest; in each half, distances below a quarter of
// num_buckets have a bucket each, longer ones share logarithmically wider buckets up to
// max_distance, and everything past it the last one. Computed in float32 as transformers does.
int64_t relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);
// [seq, seq] i64: entry (q, k) is relative_position_bucket(k - q, ...).
Tensor relative_position_buckets(int64_t seq, int64_t num_buckets, int64_t max_distance);

class T5Encoder : public nn::Module {
 public:
  explicit T5Encoder(const ModelArgs& args, TensorOptions opts = {});

  // ids [B, S] (i32 or i64) -> last_hidden_state [B, S, d_model]. `attention_mask` [B, S] (1 a
  // token, 0 padding; i32 or i64) hides padded keys, as transformers' attention_mask; undefined:
  // every token is seen. Eager mode (the masks and buckets are built on the host).
  Tensor forward(const Tensor& ids, const Tensor& attention_mask = Tensor());
  // The relative-position bias for `seq` tokens: [1, heads, seq, seq]. A frozen encoder at
  // seq <= 512 holds at most 64 x 512 x 512 floats (64 MiB) of it, shared by every block.
  Tensor position_bias(int64_t seq);

  const ModelArgs& args() const { return args_; }

  std::shared_ptr<nn::Embedding> tok_embeddings;
  std::shared_ptr<nn::Embedding> relative_attention_bias;  // [num_buckets, heads]
  // Feed-forward w1 = wi_0 (activated), w3 = wi_1, w2 = wo.
  std::shared_ptr<nn::ModuleList<common::EncoderBlock>> layers;
  std::shared_ptr<nn::RMSNorm> norm;

 private:
  ModelArgs args_;
};

}  // namespace titan::models::t5
