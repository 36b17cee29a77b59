#pragma once
// Graph mode as an execution mode (step/step_engine.h): the [parallelism] degrees split the PJRT
// plugin's devices (every process joined into one client over several ranks), the processes' own
// mesh is one rank, and the engine replays the captured step (graph_step.h) with the model's
// tensor-parallel plan read as shardings and its MoE layers' dispatchers laid out for the run.
#include <memory>

#include "titan/train/step/step_engine.h"

namespace titan::train {

std::unique_ptr<ExecutionMode> make_graph_mode();

}  // namespace titan::train
