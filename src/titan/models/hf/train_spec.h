#pragma once
// The hf family in the registry: any decoder of the model_types decoder_spec.h reads, sized by its
// config.json ([model] hf_config), imported, trained, generated from and exported.
#include <nlohmann/json.hpp>

#include "titan/models/hf/decoder_spec.h"
#include "titan/models/registry.h"

namespace titan::models::hf {

TrainSpec train_spec();

// The config.json a job's [model] section names: hf_json when set, else the file (or the folder's
// config.json) at hf_config. Throws naming the key when neither is given or the file is unreadable.
nlohmann::json job_hf_config(const ModelConfig& cfg);
// Its spec, after refusing the [model] keys the hf family does not read (the sizes are
// config.json's).
DecoderSpec spec_of(const ModelConfig& cfg);

}  // namespace titan::models::hf
