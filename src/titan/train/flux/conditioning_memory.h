#pragma once
// What FLUX's frozen encoders (conditioning.h) take on a rank when training runs them every step,
// for the memory plan (train/memory_plan.h), reckoned from the folders' configs alone: the
// models are built on meta, no weight is read.
#include <cstdint>

#include "titan/train/flux/conditioning.h"

namespace titan::train::flux {

struct ConditioningMemory {
  // Held throughout: the weights (f32) whole, or this rank's FSDP shards of them; whole and under
  // bf16, the text encoders' kept bf16 copies too.
  int64_t kept_bytes = 0;
  // Held while an encoder runs, when sharded: the most gathered at once (T5's or CLIP's root unit
  // with two blocks, the running one and the next prefetched, or the whole autoencoder).
  int64_t gathered_bytes = 0;
};

// The encoders of `paths` sharded over `shard_ranks` (1: every rank holds them whole).
ConditioningMemory conditioning_memory(const ConditioningPaths& paths, int64_t shard_ranks, bool bf16);

}  // namespace titan::train::flux
