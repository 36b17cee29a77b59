#pragma once
// Graph mode as an execution mode (step/step_engine.h): the [parallelism] degrees split the PJRT
// plugin's devices (every process joined into one client over several ranks), the processes' own
// mesh is one rank, and the engine replays the captured step (graph_step.h) with the model's
// tensor-parallel plan read as shardings and its MoE layers' dispatchers laid out for the run.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/step/step_engine.h"

namespace titan::train {

std::unique_ptr<ExecutionMode> make_graph_mode();

// Graph mode's step for a model whose loss is not a language model's (FLUX's): `loss` over the
// micro-batches its engine draws, on the runner graph mode's lay_out made (`mode` must be graph
// mode's; the step takes the place of its engine), [compile] and training.max_norm read as for a
// language model, the parameters of `layer_lists` stacked for the block loops. Over the layout's
// data-parallel devices (FSDP and replication in the program, the micro-batches holding every
// device's rows, as a language model's do); `world`: the processes the plugin joined. Tensor,
// context, pipeline and expert parallelism are refused.
std::unique_ptr<GraphStep> make_graph_step(ExecutionMode& mode, std::unique_ptr<StepLoss> loss, const JobConfig& cfg,
                                           optim::AdamW& optimizer,
                                           const std::vector<std::pair<std::string, Tensor>>& named_params,
                                           std::vector<std::string> layer_lists, dist::ProcessGroup& world,
                                           std::ostream& log);

// The device's peak memory under `step`, where its plugin reports it.
std::optional<int64_t> graph_peak_bytes(const GraphStep& step);

}  // namespace titan::train
