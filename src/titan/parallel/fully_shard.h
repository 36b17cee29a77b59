#pragma once
// FSDP (ZeRO-3) over the dp_shard ranks, as PyTorch's fully_shard (FSDP2): each parameter is
// split into one equal shard per rank, and only shards persist. FSDP2 splits dim 0 (the last
// shards padded with zero rows when the rows do not divide); so does this, unless that leaves a
// rank more than 1% over its share, when the split is a grid over the leading dims
// (parallel/shard_grid.h: 128 experts over 1024 ranks, 8 pieces of each), so that every rank
// holds about numel / ranks of every parameter at any rank count. The optimizer steps the shards; the model's own
// parameter handles hold no memory outside the forward and backward of the unit they belong to.
//
// Units: each block given (a transformer block) is one; the root unit holds every parameter
// outside the blocks (embeddings, final norm, output). Forward hooks (nn::Module) act around
// each unit without the model's code knowing:
//   root pre-forward   all-gather the root unit; prefetch block 0
//   block i pre-fwd    wait for block i's all-gather; start block i+1's
//   block i post-fwd   free block i (reshard_after_forward); hook the output's gradient
//   that gradient      (block i's backward is about to start; all of block i+1's has run)
//                      free block i+1, gather block i, start block i-1's all-gather
// A parameter's storage is swapped in place (TensorImpl::storage), so saved tensors of the
// autograd graph see the gathered values again in backward. Activation checkpointing composes:
// its recomputation runs after the gradient hook has gathered the block.
//
// Gradients are reduce-scattered (averaged) into the shards' .grad: a unit's reduce-scatter
// starts as soon as the last of its parameters' gradients is accumulated (a post-accumulate
// hook), while backward goes on through the units below it, and the full gradients are dropped
// there; reduce_gradients() after the step's last backward starts what is left, waits, and with a
// replicate group (HSDP) averages the shards' gradients across it. With activation checkpointing
// the autograd engine would accumulate every leaf at the end of backward (autograd/engine.cpp
// says why); block i + 1's gradient hook releases its parameters' accumulation
// (autograd::release_leaves) as block i's backward starts. A unit's reduce-scatter waits for the
// one before it, so a rank holds about two units' whole gradients at once either way. A block's parameters must be used in that block alone.
// Under gradient accumulation only the last micro-batch's backward reduces (set_gradient_sync).
//
// Collectives overlap computation only as far as MPI progresses them: the nonblocking
// collectives of dist/ advance when this rank calls into MPI, which FSDP does at every hook.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/dist/device_mesh.h"
#include "titan/dist/process_group.h"
#include "titan/nn/module.h"
#include "titan/parallel/shard_grid.h"

namespace titan::parallel {

// Parameters sharded over a group of their own instead of the shard group: TorchTitan's experts,
// sharded over efsdp (the dp_shard ranks that hold the same experts) while everything else is
// sharded over all of dp_shard. The shard group's other ranks hold the other parts of these
// parameters (ep's other experts), so a sum over the shard group still counts each element once.
struct OwnShardGroup {
  std::function<bool(const std::string& name)> holds;
  dist::ProcessGroup group;
};

struct FullyShardOptions {
  // Free each block's gathered parameters after its forward and gather them again for its
  // backward; false keeps them from forward to backward (more memory, fewer all-gathers).
  bool reshard_after_forward = true;
  // Start collectives early: the next unit's all-gather before the current one computes, and a
  // unit's reduce-scatter once its gradients are complete. Off, each waits until needed
  // (benchmarks measure what the overlap hides).
  bool overlap = true;
};

// Time spent in collectives, for benchmarks: seconds blocked waiting for all-gathers and for
// reduce-scatters (what the overlap did not hide).
struct FullyShardStats {
  double gather_wait_seconds = 0;
  double reduce_seconds = 0;
};

class FullyShard {
 public:
  // Shards every parameter of `root` across `shard_group` (each rank keeps its rows of the
  // values rank 0 holds, so all start from rank 0's initialisation) and installs the hooks.
  // `blocks` are modules inside `root`, run in this order in forward. Collective over both groups.
  // A meta parameter (the model built under a MetaScope, core/meta.h) gets a meta shard and no
  // collective: shard_bytes() and named_shards() say what this rank will hold before it holds it;
  // the shards are given zeroed memory and their values afterwards, through param_shards() (see
  // parallel/deferred_init.h).
  // Parameters `own` holds are sharded over own.group (and broadcast over it alone).
  FullyShard(nn::Module& root, const std::vector<nn::Module*>& blocks, dist::ProcessGroup shard_group,
             dist::ProcessGroup replicate_group, FullyShardOptions options = {},
             std::optional<OwnShardGroup> own = std::nullopt);
  ~FullyShard();
  FullyShard(const FullyShard&) = delete;
  FullyShard& operator=(const FullyShard&) = delete;

  // The shards by parameter name (Module::named_parameters' names and order): what the
  // optimizer updates. Leaves that require grad, shaped as their grid's chunk (padded).
  std::vector<std::pair<std::string, Tensor>> named_shards() const;
  std::vector<Tensor> shards() const;

  // Where each parameter's values live on this rank, in named_shards' order: for writing them in
  // place (deferred initialisation) without gathering.
  struct ParamShard {
    std::string name = {};
    Tensor param = {};  // the module's handle, of the shape FSDP sharded (where.global_shape)
    Tensor shard = {};  // padded: where's values in its leading corner
    ShardBox where = {};
  };
  std::vector<ParamShard> param_shards() const;

  // Whether the coming backward is the step's last (the default): only then do complete
  // gradients start their reduce-scatter; otherwise they accumulate in the full gradients.
  void set_gradient_sync(bool on) { sync_ = on; }
  // Sets every shard's .grad to the average over all data-parallel ranks of its rows of the
  // full gradients (a parameter without one counts as zeros), and drops the full gradients and
  // gathered parameters. Call after the step's last backward.
  void reduce_gradients();

  // The sum over the shard group of `partial` (this rank's sum of squares of its shards'
  // gradients): the square of the global gradient norm. Collective.
  double sum_over_shards(double partial);

  // Where this rank's shard of the parameter named `name` (any of its state-dict names) sits;
  // nullopt for a name that is not a sharded parameter (a buffer).
  std::optional<ShardBox> shard_box(const std::string& name) const;
  // Parameters as their shards (padded shapes), under every state-dict name, and the root's
  // persistent buffers as they are: this rank's state for a checkpoint.
  nn::StateDict state_dict() const;
  // The inverse: copies shards and buffers in; every key is checked before anything is copied.
  void load_state_dict(const nn::StateDict& state);

  // Gathers every unit (for an export that needs whole tensors) and frees them again. Collective.
  void unshard_all();
  void reshard_all();

  // Whether this rank is in the first replica (HSDP): the replicas hold identical shards, so a
  // checkpoint takes the first's.
  bool first_replica() const { return replicate_group_.rank() == 0; }
  // This rank's place in the shard group: rank 0 of it saves what every shard holds whole.
  int shard_rank() const { return shard_group_.rank(); }
  // Bytes of the shards this rank holds (parameters only).
  int64_t shard_bytes() const;
  const FullyShardStats& stats() const { return stats_; }

 private:
  struct Param {
    std::string name;
    Tensor full;   // the module's handle; its storage is swapped between gathered and none
    Tensor shard;  // of grid.chunk's shape
    dist::ProcessGroup* group = nullptr;  // the shard group, or own_'s
    ShardGrid grid;
    ShardBox box;  // this rank's
  };
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;
    std::vector<size_t> params;
    std::vector<Tensor> gathered;  // per param, while gathered or gathering: the pieces, then the tensor
    std::vector<dist::Work> pending;
    bool gathered_or_gathering = false;
    std::vector<uint64_t> hooks;
    // Gradient reduction: parameters accumulated so far in this backward, and the reduce-scatters
    // in flight (their inputs kept alive by the Work, their outputs here).
    size_t accumulated = 0;
    std::vector<dist::Work> reducing;
    std::vector<Tensor> reduced;
  };

  void start_gather(Unit& u);
  void finish_gather(Unit& u);
  void free_unit(Unit& u);
  void prefetch(size_t unit);
  void before_block_backward(size_t unit);
  void start_reduce(Unit& u);

  dist::ProcessGroup shard_group_;
  dist::ProcessGroup replicate_group_;
  std::optional<OwnShardGroup> own_;
  FullyShardOptions options_;
  std::vector<Param> params_;
  std::vector<Unit> units_;  // blocks in forward order, then the root unit
  std::map<std::string, size_t> by_name_;  // every state-dict name of a parameter -> params_
  nn::StateDict buffers_;                  // the root's persistent buffers (aliases)
  FullyShardStats stats_;
  bool sync_ = true;
  // The parameters' accumulate hooks cannot be removed and may outlive this object: they check.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// TorchTitan's apply_fsdp: every child of `layers` (the model's blocks) a unit of its own, the
// rest of `root` the root unit, sharded over mesh[dist::MeshAxis::dp_shard] and replicated over
// mesh[dist::MeshAxis::dp_replicate] (HSDP when both exceed 1); the parameters `experts` names
// (split over ep) sharded over mesh[dist::MeshAxis::efsdp] instead. Null when dp_shard is 1:
// nothing to shard.
// `runs_here`, when set, picks the blocks this rank runs (a pipeline stage's); the others' (empty)
// parameters join the root unit.
std::unique_ptr<FullyShard> apply_fsdp(nn::Module& root, nn::Module& layers, dist::DeviceMesh& mesh,
                                       FullyShardOptions options = {},
                                       const std::function<bool(const nn::Module& block)>& runs_here = nullptr,
                                       const std::function<bool(const std::string& name)>& experts = nullptr);

}  // namespace titan::parallel
