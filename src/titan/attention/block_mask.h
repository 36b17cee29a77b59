#pragma once
// A mask rule resolved to tiles: the [seq, seq] (query, key) plane of each batch row is cut into
// block_q x block_kv tiles, and each query block lists the key blocks it sees fully and those it
// sees in part; tiles in neither list are skipped outright. Splash attention runs full tiles
// without evaluating the mask and asks the rule for the pairs of partial tiles only. The
// transposed lists (per key block, the query blocks that see it) let the backward pass gather
// dK and dV one key block at a time, without two threads adding into the same rows.
//
// Build once per batch (the document ids change with it; rules without per-row data are built
// once for every row and reused as long as the length stays the same) and pass the same
// BlockMask to every layer. Copies share the lists.
#include <cstdint>
#include <memory>
#include <span>

#include "titan/attention/mask.h"

namespace titan::attention {

// Measured on this machine (bench_attention --sweep; forward + backward at seq 4096, head_dim 64
// and 128, exp loops vectorised, three rounds): 128 x 128 tiles run a causal mask 20-30% faster
// than 64 x 64 tiles, whose 64 x 64 x 64 GEMM calls are far below OpenBLAS's large-matrix rate;
// a 256-key sliding window and packed documents come out within the noise (+-10%) of 64 x 64.
// 256 x 128 is faster still for causal at head_dim 64, but 20-30% slower on the sparser masks.
inline constexpr int64_t kDefaultBlockQ = 128;
inline constexpr int64_t kDefaultBlockKv = 128;

class BlockMask {
 public:
  // Classifies every tile of `mask` for `batch` rows of `seq` tokens (a rule holding values of the
  // step being captured, Mask::lazy, by what it knows without them: other tiles stay partial). Rules that hold per-row
  // data (document ids, per-row prefix lengths) must be for exactly `batch` rows and, for
  // document ids, `seq` tokens.
  static BlockMask build(const Mask& mask, int64_t batch, int64_t seq, int64_t block_q = kDefaultBlockQ,
                         int64_t block_kv = kDefaultBlockKv);

  const Mask& mask() const;
  // Rows the lists are kept for: 1 when the rule is the same for every row, and then a batch of
  // any size may use it; else the batch it was built for.
  int64_t batch() const;
  int64_t seq() const;
  int64_t block_q() const;
  int64_t block_kv() const;
  int64_t num_q_blocks() const;
  int64_t num_kv_blocks() const;
  // Tiles that are fully or partly visible, over all kept rows: 0 when the mask hides everything
  // (a caller may skip the attention call).
  int64_t visible_tiles() const;

  // Key blocks that query block qb of batch row b sees fully / in part, ascending. Any b serves a
  // mask kept for one row.
  std::span<const int32_t> full_kv(int64_t b, int64_t qb) const;
  std::span<const int32_t> partial_kv(int64_t b, int64_t qb) const;
  // The transpose: query blocks that see key block kb fully / in part, ascending.
  std::span<const int32_t> full_q(int64_t b, int64_t kb) const;
  std::span<const int32_t> partial_q(int64_t b, int64_t kb) const;

 private:
  struct Data;
  explicit BlockMask(std::shared_ptr<const Data> d) : d_(std::move(d)) {}
  std::shared_ptr<const Data> d_;
};

}  // namespace titan::attention
