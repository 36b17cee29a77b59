#include "titan/attention/block_mask.h"

#include <algorithm>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/parallel.h"

namespace titan::attention {

namespace {

// Block lists of `rows` rows (one per (batch row, block)), in one array with offsets.
struct Lists {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> blocks;

  std::span<const int32_t> row(int64_t r) const {
    return {blocks.data() + offsets[r], static_cast<size_t>(offsets[r + 1] - offsets[r])};
  }
};

}  // namespace

struct BlockMask::Data {
  Mask mask;
  int64_t batch, seq, block_q, block_kv, nq, nk;
  Lists full_kv, partial_kv, full_q, partial_q;

  int64_t row(int64_t b) const { return batch == 1 ? 0 : b; }
};

BlockMask BlockMask::build(const Mask& mask, int64_t batch, int64_t seq, int64_t block_q, int64_t block_kv) {
  TITAN_CHECK(batch >= 1 && seq >= 1, "BlockMask::build: batch and seq must be >= 1, got batch = ", batch,
              ", seq = ", seq);
  TITAN_CHECK(block_q >= 1 && block_kv >= 1,
              "BlockMask::build: block sizes must be >= 1, got block_q = ", block_q,
              ", block_kv = ", block_kv, " (set [attention] block_q and block_kv)");
  TITAN_CHECK(mask.batch() == 0 || mask.batch() == batch, "BlockMask::build: ", mask.describe(), " is for ",
              mask.batch(), " batch rows, but the batch has ", batch,
              "; give one id row / prefix length per row");
  TITAN_CHECK(mask.seq() == 0 || mask.seq() == seq, "BlockMask::build: ", mask.describe(), " has ids for ",
              mask.seq(), " tokens per row, but the sequence has ", seq, "; give one document id per token");

  const int64_t rows = mask.batch() == 0 ? 1 : batch;
  const int64_t nq = (seq + block_q - 1) / block_q, nk = (seq + block_kv - 1) / block_kv;
  // Every tile's class first (rows x nq x nk bytes, small next to the lists' users), then the
  // lists in both orientations from it.
  std::vector<Visibility> grid(static_cast<size_t>(rows * nq * nk));
  // Threads only for large masks: a causal rule classifies a tile in nanoseconds, less than
  // waking a thread costs.
  parallel_for(0, rows * nq, std::max<int64_t>(1, (int64_t{1} << 16) / nk), [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> tile(static_cast<size_t>(block_q * block_kv));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / nq, q0 = (r % nq) * block_q, q1 = std::min(seq, q0 + block_q);
      for (int64_t kb = 0; kb < nk; ++kb) {
        const int64_t k0 = kb * block_kv, k1 = std::min(seq, k0 + block_kv);
        Visibility v = mask.classify(b, q0, q1, k0, k1);
        if (v == Visibility::partial && !mask.lazy()) {
          // Compositions classify conservatively; the pairs themselves settle it, so a tile is
          // never evaluated in the kernel for nothing. A rule holding values of a captured step
          // cannot be evaluated here: its tiles stay partial, and the program decides the pairs.
          const auto n = static_cast<size_t>((q1 - q0) * (k1 - k0));
          mask.fill(b, q0, q1, k0, k1, tile.data());
          const auto seen = static_cast<size_t>(std::count(tile.begin(), tile.begin() + n, uint8_t{1}));
          v = seen == 0 ? Visibility::none : seen == n ? Visibility::full : Visibility::partial;
        }
        grid[r * nk + kb] = v;
      }
    }
  });

  auto d = std::make_shared<Data>(Data{mask, rows, seq, block_q, block_kv, nq, nk, {}, {}, {}, {}});
  for (int64_t b = 0; b < rows; ++b) {
    const Visibility* g = grid.data() + b * nq * nk;
    for (int64_t qb = 0; qb < nq; ++qb) {
      for (int64_t kb = 0; kb < nk; ++kb) {
        const Visibility v = g[qb * nk + kb];
        if (v != Visibility::none)
          (v == Visibility::full ? d->full_kv : d->partial_kv).blocks.push_back(static_cast<int32_t>(kb));
      }
      d->full_kv.offsets.push_back(static_cast<int64_t>(d->full_kv.blocks.size()));
      d->partial_kv.offsets.push_back(static_cast<int64_t>(d->partial_kv.blocks.size()));
    }
    for (int64_t kb = 0; kb < nk; ++kb) {
      for (int64_t qb = 0; qb < nq; ++qb) {
        const Visibility v = g[qb * nk + kb];
        if (v != Visibility::none)
          (v == Visibility::full ? d->full_q : d->partial_q).blocks.push_back(static_cast<int32_t>(qb));
      }
      d->full_q.offsets.push_back(static_cast<int64_t>(d->full_q.blocks.size()));
      d->partial_q.offsets.push_back(static_cast<int64_t>(d->partial_q.blocks.size()));
    }
  }
  return BlockMask(std::move(d));
}

const Mask& BlockMask::mask() const {
  return d_->mask;
}
int64_t BlockMask::batch() const {
  return d_->batch;
}
int64_t BlockMask::seq() const {
  return d_->seq;
}
int64_t BlockMask::block_q() const {
  return d_->block_q;
}
int64_t BlockMask::block_kv() const {
  return d_->block_kv;
}
int64_t BlockMask::num_q_blocks() const {
  return d_->nq;
}
int64_t BlockMask::num_kv_blocks() const {
  return d_->nk;
}
int64_t BlockMask::visible_tiles() const {
  return static_cast<int64_t>(d_->full_kv.blocks.size() + d_->partial_kv.blocks.size());
}

std::span<const int32_t> BlockMask::full_kv(int64_t b, int64_t qb) const {
  return d_->full_kv.row(d_->row(b) * d_->nq + qb);
}
std::span<const int32_t> BlockMask::partial_kv(int64_t b, int64_t qb) const {
  return d_->partial_kv.row(d_->row(b) * d_->nq + qb);
}
std::span<const int32_t> BlockMask::full_q(int64_t b, int64_t kb) const {
  return d_->full_q.row(d_->row(b) * d_->nk + kb);
}
std::span<const int32_t> BlockMask::partial_q(int64_t b, int64_t kb) const {
  return d_->partial_q.row(d_->row(b) * d_->nk + kb);
}

}  // namespace titan::attention
