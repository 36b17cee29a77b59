#pragma once
// Data parallelism with replicated parameters (DDP): every rank of a group holds all parameters,
// trains on its own slice of the global batch, and after backward the gradients are averaged
// over the group, so every replica takes the same optimizer step.
//
// Gradients travel in buckets (flat buffers of about bucket_bytes, filled in reverse parameter
// order, the order backward produces them), one all-reduce per bucket, all started before the
// first is waited on. They are reduced after backward rather than as each becomes ready: the
// autograd engine runs every leaf's accumulator last (sequence_nr 0), so a post-accumulate hook
// would fire no earlier than the end of backward anyway. Overlap with backward needs the engine to
// accumulate leaf gradients as soon as they are complete.
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::parallel {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's default bucket_cap_mb
};

class DataParallel {
 public:
  // `params` must be contiguous CPU f32 or f64 tensors, the same list in the same order on every
  // rank of `group`.
  DataParallel(std::vector<Tensor> params, dist::ProcessGroup group, DataParallelOptions options = {});

  // Copies rank 0's parameters to every rank, so that replicas start identical whatever each
  // rank initialised or loaded.
  void broadcast_parameters();
  // Replaces every gradient by its mean over the group (a parameter without a gradient counts as
  // zeros and gets the mean as its gradient). Call after the last backward of a step.
  void average_gradients();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  dist::ProcessGroup& group() { return group_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    Tensor flat;
  };

  std::vector<Tensor> params_;
  dist::ProcessGroup group_;
  std::vector<Bucket> buckets_;
};

}  // namespace titan::parallel
