#pragma once
#include "titan/models/registry.h"

namespace titan::models::llama3 {

// Applies the job's parallel plans to a built Llama 3 in TorchTitan's order (tensor parallel,
// activation checkpointing, compile, FSDP); today: activation checkpointing of the blocks.
void parallelize(CausalLM& model, const ParallelizeOptions& options);

}  // namespace titan::models::llama3
