#pragma once
#include "titan/models/registry.h"
#include "titan/parallel/tp_styles.h"

namespace titan::models::llama3 {

// Applies the job's parallel plans to a built Llama 3 in TorchTitan's order
// (common::parallelize_decoder), with apply_tp's tensor-parallel plan.
Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options);
// The tensor-parallel plan alone, stated to `tp` (eager's TensorParallel or graph mode's TpLayout).
void apply_tp(CausalLM& model, parallel::TpStyles& tp);

}  // namespace titan::models::llama3
