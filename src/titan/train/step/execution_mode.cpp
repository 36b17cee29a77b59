// make_execution_mode and eager mode: the one place that chooses a mode from the config.
#include "titan/train/graph_mode/graph_engine.h"
#include "titan/train/step/eager_step.h"
#include "titan/train/step/pipeline_step.h"
#include "titan/train/step/step_engine.h"

namespace titan::train {

ExecutionMode::Checkpointing ExecutionMode::checkpointing(const JobConfig& c) const {
  const auto& ac = c.activation_checkpoint;
  if (ac.mode == "none") return {.summary = "off"};
  return {.mode = ac.mode,
          .every_k = ac.every_k(),
          .summary = ac.mode + " (" + (ac.every_k() == 1 ? "every block" : "1 block in " + std::to_string(ac.every_k())) +
                     " recomputed in backward)"};
}

namespace {

// Op by op over the world's ranks, which the degrees split; pipeline stages when pp > 1.
class EagerMode : public ExecutionMode {
 public:
  Layout lay_out(const dist::MeshDegrees& degrees, dist::ProcessGroup world, const JobConfig&) override {
    dist::ParallelDims dims(degrees, world.size());
    return {.dims = dims, .mesh = std::make_unique<dist::DeviceMesh>(std::move(world), dims)};
  }
  std::unique_ptr<StepEngine> make_engine(const StepParts& parts) override {
    if (parts.plans.pp) return make_pipeline_step(parts);
    return make_eager_step(parts, step_parallelism(parts), "eager");
  }
};

}  // namespace

std::unique_ptr<ExecutionMode> make_eager_mode() {
  return std::make_unique<EagerMode>();
}

std::unique_ptr<ExecutionMode> make_execution_mode(const JobConfig& cfg) {
  return cfg.compile.graph() ? make_graph_mode() : make_eager_mode();
}

}  // namespace titan::train
