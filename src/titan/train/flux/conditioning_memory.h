#pragma once
// What FLUX's frozen encoders (conditioning.h) take on a rank when training runs them every step,
// for the memory plan (train/memory_plan.h), reckoned from the folders' configs alone: the
// models are built on meta, no weight is read.
#include <cstdint>

#include "titan/train/flux/conditioning.h"
#include "titan/train/memory_plan.h"

namespace titan::train::flux {

// The encoders of `paths` sharded over `shard_ranks` (1: every rank holds them whole). Kept: the
// weights (f32) whole, or this rank's FSDP shards of them; whole and under bf16, the bf16 copies
// ConditioningStack keeps of the text encoders' matrices too. Gathered, when sharded: the root
// unit of T5, CLIP or the autoencoder's encoder with two of its blocks (the running one and the
// next, prefetched), whichever is most.
FrozenBytes conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16);

}  // namespace titan::train::flux
