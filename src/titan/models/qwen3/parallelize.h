#pragma once
#include "titan/models/registry.h"

namespace titan::models::qwen3 {

// Applies the job's parallel plans to a built Qwen 3 (dense or MoE) in TorchTitan's order (tensor
// parallel, expert parallel, activation checkpointing, compile, FSDP); today: activation
// checkpointing of the blocks, then FSDP when the mesh shards.
std::unique_ptr<parallel::FullyShard> parallelize(CausalLM& model, const ParallelizeOptions& options);

}  // namespace titan::models::qwen3
