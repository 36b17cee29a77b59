#pragma once
// Context parallelism applied to a model from outside its code, as TorchTitan's context_parallel
// does: each cp rank trains on its share of every sequence (parallel/context_parallel.h's
// load-balanced layout) and the model's attention kernel is replaced by ring attention.
//
// Per token work needs nothing more: norms, projections, feed-forwards and the loss run on the
// local tokens. What depends on positions is mapped to this rank's: the RoPE tables keep the rows
// of its tokens' global positions, and ring attention masks by global positions and by the
// document ids of the whole sequence, which the trainer hands over with every micro-batch.
//
// Parameters are replicated across cp (FSDP shards them over dp_shard, as without cp); each
// rank's gradients come from its own tokens' loss, so they are averaged over cp after backward,
// as data parallelism averages over dp.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"
#include "titan/parallel/context_parallel.h"

namespace titan::parallel {

class ContextParallel {
 public:
  // `seq_len`: the training sequences' length, a multiple of 2 * the group's size; tiles of
  // block_q x block_kv, as splash attention's. `causal` false: attention sees every pair (FLUX).
  ContextParallel(dist::ProcessGroup group, int64_t seq_len, int64_t block_q, int64_t block_kv, bool causal = true);

  // Keeps, in place, the rows of a position table [max_seq, ...] (RoPE's cos or sin) at this
  // rank's tokens' positions, so that a model applying it from position 0 rotates each local
  // token by its global position.
  void shard_position_table(const Tensor& table) const;

  // This rank's tokens of a [batch, seq_len] tensor of the batch (inputs, labels, document ids).
  Tensor shard(const Tensor& t) const;
  // This rank's tokens of any tensor whose `dim` runs over a stream's tokens (cp_shard's layout):
  // a model whose sequence joins several streams (FLUX's text and image) shards each of them.
  Tensor shard(const Tensor& t, int64_t dim) const;
  // The micro-batch's document ids [batch, seq_len] of the whole sequences (undefined: causal
  // only), before its forward; ring attention masks by them until the next call.
  void begin_batch(int64_t batch, const Tensor& document_ids);
  // What replaces the model's attention kernel: ring attention over the group, with the layer's
  // scale, cap and window (window_left as Mask::sliding_window's).
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale = std::nullopt,
                std::optional<double> softcap = std::nullopt, std::optional<int64_t> window_left = std::nullopt);

  // Averages over the group the gradients of `params` (after data parallelism's reduction).
  void average_gradients(const std::vector<Tensor>& params);

  dist::ProcessGroup& group() { return group_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  dist::ProcessGroup group_;
  int64_t seq_len_;
  RingAttentionOptions options_;
  int64_t batch_ = -1;
  // The batch's masks, one per window (nullopt: none), built when a layer first asks.
  std::map<std::optional<int64_t>, RingMasks> masks_;
};

}  // namespace titan::parallel
