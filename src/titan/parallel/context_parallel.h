#pragma once
// Context parallelism: the sequence dimension split over the ranks of a `cp` group, attention
// computed by ring attention. Everything but attention is per token and runs on the local tokens
// as it would on the whole sequence; attention needs every earlier key, which the ring brings
// round: each rank passes its K and V on to the next rank while it attends to the block it holds.
//
// Layout (load balancing for causal attention): the sequence is cut into 2 * cp equal chunks and
// cp rank r holds chunks r and 2 * cp - 1 - r, in that order. A rank with an early chunk then has
// a late one too, so every rank has about the same share of the causal triangle at every step of
// the ring (the plain split would leave rank 0 one block of work and rank cp - 1 cp blocks).
#include <cstdint>
#include <optional>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::parallel {

// The global position of each of cp rank `cp_rank`'s tokens, in local order. seq_len must be a
// multiple of 2 * cp_size.
std::vector<int64_t> cp_positions(int64_t seq_len, int64_t cp_rank, int64_t cp_size);

// cp rank `cp_rank`'s tokens of x along `dim` (negative counts from the end), as a new dense
// tensor: chunks cp_rank and 2 * cp_size - 1 - cp_rank of 2 * cp_size. No autograd.
Tensor cp_shard(const Tensor& x, int64_t dim, int64_t cp_rank, int64_t cp_size);

// The inverse over the group: every rank's `local` (cp_shard's layout, same shape on every rank)
// gathered back into the global order along `dim`. Collective; for tests and metrics, not for
// training paths (it holds the whole sequence). f32, f64, i32 or i64.
Tensor cp_unshard(const Tensor& local, int64_t dim, dist::ProcessGroup& cp_group);

struct RingAttentionOptions {
  // false: every query sees every key (FLUX's joint attention over text and image tokens); the
  // tokens' order then does not matter, and documents and windows are refused.
  bool causal = true;
  // Optional GLOBAL document ids [B, S] (i32 or i64) of the whole sequence, not this rank's
  // slice: tokens attend causally within their own document only (packed sequences).
  Tensor document_ids = {};
  std::optional<double> scale = std::nullopt;    // unset: 1 / sqrt(head_dim)
  std::optional<double> softcap = std::nullopt;  // scores -> softcap * tanh(scores / softcap)
  // A query at global position p sees keys p - window_left .. p only (Mask::sliding_window).
  std::optional<int64_t> window_left = std::nullopt;
  // Tiles of the local query and key rows. A tile that straddles the rank's two chunks is correct
  // but is classified partial more often; sizes that divide the chunk (S / (2 * cp)) avoid that.
  int64_t block_q = attention::kDefaultBlockQ;
  int64_t block_kv = attention::kDefaultBlockKv;
};

// The block masks of every ring step of one rank: step s holds the keys of cp rank (r - s) mod
// cp, so its mask is the causal (and document, and window) rule at this rank's query positions and
// that rank's key positions. Build once per batch (document ids change with it) and pass to every
// layer, as a BlockMask is for splash attention.
class RingMasks {
 public:
  static RingMasks build(int64_t batch, int64_t local_seq, const RingAttentionOptions& opts, int64_t cp_rank,
                         int64_t cp_size);

  const attention::BlockMask& step(int64_t s) const { return steps_[static_cast<size_t>(s)]; }
  int64_t cp_rank() const { return cp_rank_; }
  int64_t cp_size() const { return cp_size_; }
  int64_t batch() const { return batch_; }
  int64_t local_seq() const { return local_seq_; }

 private:
  // No default constructor, so that ring_attention(q, k, v, {}, group) means the options.
  RingMasks(int64_t cp_rank, int64_t cp_size, int64_t batch, int64_t local_seq)
      : cp_rank_(cp_rank), cp_size_(cp_size), batch_(batch), local_seq_(local_seq) {}
  std::vector<attention::BlockMask> steps_ = {};
  int64_t cp_rank_ = 0, cp_size_ = 1, batch_ = 0, local_seq_ = 0;
};

// Causal attention (AND the document mask and the window when given; with causal = false, every
// pair; scores scaled and capped as splash attention's) over the whole global sequence, for this
// rank's queries. q [B, S / cp, Hq, D], k and v [B, S / cp, Hkv, D]: this rank's tokens in
// cp_shard's layout, f32 or f64; Hq a multiple of Hkv (grouped-query attention, as splash
// attention). Returns this rank's rows of the output, [B, S / cp, Hq, D]. Differentiable: its
// backward (a second ring, collective too) gives dq, dk, dv of the local tokens. Every rank of
// cp_group must call it (and run backward) in the same order. With a group of one it computes
// what splash_attention does with a causal (document) mask, bit for bit.
//
// Each of the cp steps attends to the K/V block held (tile kernels of splash attention; tiles the
// mask hides are skipped) while the block goes on to the next rank and the next arrives from the
// previous one (nonblocking send/recv, waited at the end of the step); partial results are merged
// by their logsumexp. Backward runs the ring again: K and V travel as in forward, and each
// block's dK/dV partial sum travels one step behind it, adding each rank's share, and comes home
// to its owner after the last step. Under AutocastGuard(kBF16) with f32 inputs the tiles multiply
// bf16 copies, as splash attention's do.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingAttentionOptions& opts,
                      dist::ProcessGroup& cp_group);
// The same with masks built beforehand (RingMasks::build with this rank's rank and the group's
// size), and the scores' scale and cap (as RingAttentionOptions').
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingMasks& masks,
                      dist::ProcessGroup& cp_group, std::optional<double> scale = std::nullopt,
                      std::optional<double> softcap = std::nullopt);

// Cumulative over every ring_attention forward and backward of this process, for benchmarks: how
// much of the communication the computation hid.
struct RingAttentionStats {
  int64_t bytes_sent = 0;
  double wait_seconds = 0;     // blocked in waits for sends and receives
  double compute_seconds = 0;  // in the tile kernels, merges and gradient sums
};
const RingAttentionStats& ring_attention_stats();
void reset_ring_attention_stats();

}  // namespace titan::parallel
