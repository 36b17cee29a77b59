#pragma once
#include "titan/models/registry.h"

namespace titan::models::llama3 {

// What the registry holds under "llama3": builds a Transformer from the [model] section (flavor,
// vocab override, attention path), sizes a flavor without building it, and reads and writes
// Hugging Face checkpoints (state_dict_adapter.h).
TrainSpec train_spec();

}  // namespace titan::models::llama3
