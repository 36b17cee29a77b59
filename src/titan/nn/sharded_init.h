#pragma once
// Sharded initialisation: where nn::init writes when a parameter's handle does not hold its values.
//
// A model's reset_parameters calls nn::init on its own handles, in an order that fixes which
// indices of the generator's stream each tensor draws. When parallel/ has split a parameter (FSDP
// rows, tensor-parallel slices, or both), the values a rank owns live in another tensor. It
// registers, per handle, a ShardTarget: `dest` holds the box [offsets, offsets + sizes) of the
// logical tensor of `global_shape`, the tensor a one-rank run would fill. Inside a
// ShardedInitScope, an init function called on a registered handle
//   - reserves numel(global_shape) indices of the stream, as the one-rank fill does, so every
//     later tensor draws the same indices on any layout, and
//   - writes into dest's leading corner exactly the values the one-rank fill puts in the box,
//     bit for bit; the rest of dest (padding) is left as it is.
// An init function refuses a meta handle (core/meta.h) that has no target.
//
// Composition: the target describes the box in the logical tensor, whatever split it. FSDP alone
// gives (its padded shard, the handle's shape, the box of its piece); a tensor-parallel slice at
// `tp_offsets` of a `global_shape` tensor, then FSDP-sharded, gives (the same dest, global_shape,
// tp_offsets + the piece's offsets). parallel/deferred_init.h
// builds these.
#include <cstdint>
#include <unordered_map>

#include "titan/core/tensor.h"

namespace titan::nn::init {

struct ShardTarget {
  // Real, of the handle's dtype; dest.size(d) >= sizes[d] on every dim.
  Tensor dest = {};
  // The logical tensor that a one-rank init fills; as many dims as the handle.
  Shape global_shape = {};
  // The box: its first index in the logical tensor, and its extent, per dim.
  Shape offsets = {};
  Shape sizes = {};
};

class ShardTargets {
 public:
  // Registers where `handle`'s values live; the target is checked now (shapes, bounds, dtype), so
  // a bad plan fails here rather than as wrong values. The handle is kept alive with the entry.
  void add(const Tensor& handle, ShardTarget target);
  const ShardTarget* find(const Tensor& handle) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Tensor handle = {};
    ShardTarget target = {};
  };
  // Keyed by the handle's TensorImpl: the module's member and its registry alias one.
  std::unordered_map<const TensorImpl*, Entry> entries_;
};

// Makes `targets` visible to nn::init on this thread for the scope's lifetime. Scopes nest; a
// handle is looked up from the innermost out. `targets` must outlive the scope.
class ShardedInitScope {
 public:
  explicit ShardedInitScope(const ShardTargets& targets);
  ~ShardedInitScope();
  ShardedInitScope(const ShardedInitScope&) = delete;
  ShardedInitScope& operator=(const ShardedInitScope&) = delete;

  // The target registered for `handle` in this thread's scopes; null when none has one.
  static const ShardTarget* find(const Tensor& handle);

 private:
  const ShardTargets* targets_;
  const ShardedInitScope* previous_;
};

// The box of a target as runs of elements consecutive in the logical tensor's row-major order;
// run r fills box elements [r * length, (r + 1) * length) (row-major over the box's sizes) with
// the logical tensor's elements [start(r), start(r) + length). Trailing dims the box spans whole
// merge into one run, so an FSDP box is a single run.
class BoxRuns {
 public:
  explicit BoxRuns(const ShardTarget& target);
  int64_t count() const { return count_; }
  int64_t length() const { return length_; }
  int64_t start(int64_t r) const;

 private:
  Shape offsets_;
  Shape sizes_;
  Shape global_strides_;
  size_t run_dim_ = 0;  // the dim a run starts in; those after it are whole
  int64_t count_ = 0;
  int64_t length_ = 0;
};

}  // namespace titan::nn::init
