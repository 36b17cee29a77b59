#pragma once
// Data parallelism with replicated parameters (DDP): every rank of a group holds all parameters,
// trains on its own slice of the global batch, and after backward the gradients are averaged
// over the group, so every replica takes the same optimizer step.
//
// Gradients travel in buckets (flat buffers of about bucket_bytes, filled in reverse parameter
// order, the order backward produces them), one all-reduce per bucket, started as soon as the
// last gradient of the bucket is accumulated (a post-accumulate hook), while backward goes on.
// The autograd engine accumulates leaves as they complete only in a graph without activation
// checkpointing; with it, every bucket starts at the end of backward. average_gradients() starts
// what is left and waits. Under gradient accumulation only the last micro-batch's backward
// reduces (set_gradient_sync).
#include <cstdint>
#include <memory>
#include <optional>
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
  ~DataParallel() { *alive_ = false; }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Copies rank 0's parameters to every rank, so that replicas start identical whatever each
  // rank initialised or loaded.
  void broadcast_parameters();
  // Whether the coming backward is the step's last (the default): only then do complete buckets
  // start their all-reduce.
  void set_gradient_sync(bool on) { sync_ = on; }
  // Replaces every gradient by its mean over the group (a parameter without a gradient counts as
  // zeros and gets the mean as its gradient). Call after the last backward of a step.
  void average_gradients();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    Tensor flat;
    size_t accumulated = 0;  // gradients complete in this backward
    std::optional<dist::Work> reducing;
  };
  void start_reduce(Bucket& b);

  std::vector<Tensor> params_;
  dist::ProcessGroup group_;
  std::vector<Bucket> buckets_;
  bool sync_ = true;
  // The parameters' accumulate hooks cannot be removed and may outlive this object: they check.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace titan::parallel
