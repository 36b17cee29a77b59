#pragma once
// The language models' workload (train/workload.h): token data from a DataLoader (its position
// checkpointed), a models::CausalLM built by the family's TrainSpec, the execution mode's step
// (eager, pipeline, graph) or an objective's (GRPO), cross-entropy validation.
#include <memory>
#include <string>
#include <vector>

#include "titan/train/workload.h"

namespace titan::train {

std::unique_ptr<Workload> make_language_model_workload(const JobConfig& cfg, MakeEngine objective_engine);

// "a,b" -> {"a", "b"}, spaces around the items dropped; "" -> {}.
std::vector<std::string> split_list(const std::string& text);

}  // namespace titan::train
