#pragma once
// The parallel plans of a FLUX transformer, as TorchTitan's flux parallelize_flux: activation
// checkpointing of each double- and single-stream block, then FSDP (HSDP over dp_replicate) with
// every block a unit of its own and the embedders and final layer the root unit. Context
// parallelism over mesh cp: options.seq_len is the joint [txt; img] length, of which each cp rank
// holds 1 / cp of either stream (the trainer shards them, ContextParallel::shard(t, dim)), and
// attention runs as ring attention over every pair. FLUX has no tensor, pipeline or expert plan
// (the trainer refuses those degrees).
#include "titan/models/flux/model.h"
#include "titan/models/registry.h"

namespace titan::models::flux {

// The blocks in the order a forward runs them: double_blocks.*, then single_blocks.*.
std::vector<nn::Module*> blocks(FluxTransformer& model);

// options.activation_checkpoint_mode: "none" | "full" | "selective" (every
// activation_checkpoint_every_k-th block of each stack). FSDP applies when options.mesh's dp_shard
// exceeds 1.
Parallelized parallelize(FluxTransformer& model, const ParallelizeOptions& options);

}  // namespace titan::models::flux
