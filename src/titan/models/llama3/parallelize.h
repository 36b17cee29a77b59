#pragma once
#include "titan/models/registry.h"

namespace titan::models::llama3 {

// Applies the job's parallel plans to a built Llama 3 in TorchTitan's order: tensor parallelism
// (common/parallelize.h, the embedding and output split over the vocabulary) when the
// mesh has tp ranks, activation checkpointing of the blocks, then FSDP when the mesh shards.
Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options);

}  // namespace titan::models::llama3
