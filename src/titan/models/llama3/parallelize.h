#pragma once
#include "titan/models/registry.h"

namespace titan::models::llama3 {

// Applies the job's parallel plans to a built Llama 3 in TorchTitan's order (tensor parallel,
// activation checkpointing, compile, FSDP); today: activation checkpointing of the blocks, then
// FSDP when the mesh shards.
std::unique_ptr<parallel::FullyShard> parallelize(CausalLM& model, const ParallelizeOptions& options);

}  // namespace titan::models::llama3
