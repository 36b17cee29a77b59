#pragma once
// How a parameter is split over n ranks so that each holds close to numel / n of it, whatever
// its shape. FSDP2 splits dim 0 only (the last shards padded or short); that keeps a rank's
// share only while dim 0 is large against n: 128 experts over 1024 ranks leave each rank a whole
// expert, 8x its share, and 896 ranks nothing. A grid over the leading dims (experts [128, 1536,
// 4096] as 128 x 8 pieces) keeps every rank's piece a box of the tensor, so checkpoints,
// deferred initialisation and XLA's tiled shardings take it as they take rows.
#include <cstdint>
#include <optional>

#include "titan/core/shape.h"
#include "titan/core/tensor.h"

namespace titan::parallel {

// parts[d] pieces along dim d, their product the ranks; rank r holds the piece at its row-major
// coordinate in that grid. A dim of one part is whole on every rank.
struct ShardGrid {
  Shape parts = {};
  Shape chunk = {};  // per dim: ceil(size / parts), the shard's shape (the last pieces padded)
  // Whether only dim 0 is split: the ranks' pieces, gathered in rank order, are the tensor's rows.
  bool rows_only() const;
  int64_t shard_numel() const;
};

// This rank's piece: the box [offsets, offsets + sizes) of the tensor; sizes may be smaller
// than the grid's chunk (the last pieces) or 0 (more pieces than a dim has).
struct ShardBox {
  Shape offsets = {};
  Shape sizes = {};
  Shape global_shape = {};
  // This box of `whole` (a tensor of global_shape), as a view.
  Tensor of(const Tensor& whole) const;
  // The box's values in a piece padded to the grid's chunk: its leading corner, as a view.
  Tensor valid(const Tensor& piece) const;
};

struct GridOptions {
  // Dims before this one stay whole (a stack's layer dim).
  int64_t first_dim = 0;
  // A dim that stays whole (one tensor parallelism splits).
  std::optional<int64_t> skip_dim = std::nullopt;
  // Only parts that divide their dim (XLA's shardings as graph mode uses them); when no grid
  // does, every dim gets one part.
  bool exact = false;
};

// The grid over `ranks` for a tensor of `shape`: of the splits within 1% of the least padding,
// the one that puts most parts on the earliest dims. So dim 0 alone wins whenever its padding
// costs under 1% of a rank's share, as it does for every matrix with many more rows than ranks,
// and the other splits only come in where FSDP2's would be uneven by more.
ShardGrid plan_shard_grid(const Shape& shape, int64_t ranks, const GridOptions& options = {});

// Rank `rank`'s box of a tensor of `shape` split by `grid`.
ShardBox grid_box(const Shape& shape, const ShardGrid& grid, int64_t rank);

}  // namespace titan::parallel
