#pragma once
#include "titan/models/registry.h"
#include "titan/parallel/tp_styles.h"

namespace titan::models::qwen3 {

// Applies the job's parallel plans to a built Qwen 3 (dense or MoE) in TorchTitan's order: tensor
// parallelism (common/parallelize.h; MoE experts replicated across tp; a tied output
// shares the embedding's vocabulary split), expert parallelism (each ep rank holds a slice of
// every MoE layer's experts), context parallelism, activation checkpointing of the blocks, then
// FSDP when the mesh shards.
Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options);
// The tensor-parallel plan alone, stated to `tp` (eager's TensorParallel or graph mode's TpLayout).
void apply_tp(CausalLM& model, parallel::TpStyles& tp);

}  // namespace titan::models::qwen3
