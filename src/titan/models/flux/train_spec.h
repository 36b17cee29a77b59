#pragma once
#include "titan/models/flux/model_args.h"
#include "titan/models/model_config.h"
#include "titan/models/registry.h"

namespace titan::models::flux {

// The flavor [model] names, after refusing by key what a FLUX transformer does not read
// (vocab_size, n_layers, weight_tying, tokenizer_path, attention other than splash, document
// masking, [moe]).
FluxModelArgs args_from(const ModelConfig& cfg);

// model.name = "flux": its flavors and summary; the trainer's flux workload
// (train/flux/flux_workload.h) builds, parallelizes and trains it.
TrainSpec train_spec();

}  // namespace titan::models::flux
