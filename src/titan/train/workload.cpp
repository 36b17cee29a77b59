#include "titan/train/workload.h"

#include "titan/train/flux/flux_workload.h"
#include "titan/train/language_model_workload.h"

namespace titan::train {

std::unique_ptr<Workload> make_workload(const JobConfig& cfg, MakeEngine objective_engine) {
  const models::TrainSpec& spec = models::get_train_spec(cfg.model.name);
  if (spec.workload == "flux") {
    TITAN_CHECK(!objective_engine, "Trainer: model.name = \"", cfg.model.name,
                "\" trains by flow matching; training.objective = \"", cfg.training.objective,
                "\" is for language models");
    return flux::make_flux_workload(cfg);
  }
  TITAN_CHECK(spec.workload == "language_model", "model '", spec.name, "' names workload '", spec.workload,
              "', which train/ does not have (language_model, flux)");
  return make_language_model_workload(cfg, std::move(objective_engine));
}

}  // namespace titan::train
