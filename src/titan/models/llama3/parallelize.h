#pragma once
#include "titan/models/registry.h"
#include "titan/parallel/tp_styles.h"

namespace titan::models::llama3 {

// Applies the job's parallel plans to a built Llama 3 in TorchTitan's order: tensor parallelism
// (common/parallelize.h, the embedding and output split over the vocabulary) when the
// mesh has tp ranks, activation checkpointing of the blocks, then FSDP when the mesh shards.
Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options);
// The tensor-parallel plan alone, stated to `tp` (eager's TensorParallel or graph mode's TpLayout).
void apply_tp(CausalLM& model, parallel::TpStyles& tp);

}  // namespace titan::models::llama3
