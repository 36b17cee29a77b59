#pragma once
// Deferred ("meta") tensors: a model too large for one rank is built with its parameters as meta
// tensors (shape, strides, dtype, device, but no memory), then sharded, and only the shards are
// filled (nn::init writes each rank's part; parallel/deferred_init.h). The whole model never
// exists on any rank.
//
// Under a MetaScope on this thread, Tensor::empty, zeros, ones and full make meta tensors. A meta
// tensor's Storage exists, with its size and device, and has no memory: views of it are views
// (tied weights share it, as they share a real one), and Storage::materialize() gives it zeroed
// memory in place, so every handle and view sees it. Reading or writing a meta tensor's data fails
// with an error naming it. Tensors that carry values when made (from_vector, arange, scalar) are
// always real, as are item() and to_vector()'s copies; rand and randn are refused, as values
// drawn at construction could never be reproduced from the shard a rank owns. Ops allocate their
// outputs with Tensor::empty, so an op run under a scope fails on its meta output: a table a
// constructor computes (RoPE's cos and sin) opens a MetaScope(false) around itself, and so stays
// real under an outer scope.
namespace titan {

class MetaScope {
 public:
  // `on`: whether factories make meta tensors inside this scope; false makes a real region inside
  // a meta one. Scopes nest; the previous setting returns at the end of this one.
  explicit MetaScope(bool on = true);
  ~MetaScope();
  MetaScope(const MetaScope&) = delete;
  MetaScope& operator=(const MetaScope&) = delete;

  // Whether this thread's factories make meta tensors now.
  static bool active();

 private:
  bool previous_;
};

}  // namespace titan
