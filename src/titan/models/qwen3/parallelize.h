#pragma once
#include "titan/models/registry.h"

namespace titan::models::qwen3 {

// Applies the job's parallel plans to a built Qwen 3 (dense or MoE) in TorchTitan's order: tensor
// parallelism (common/parallelize.h; MoE experts replicated across tp; a tied output
// shares the embedding's vocabulary split), expert parallelism (each ep rank holds a slice of
// every MoE layer's experts), context parallelism, activation checkpointing of the blocks, then
// FSDP when the mesh shards.
Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options);

}  // namespace titan::models::qwen3
