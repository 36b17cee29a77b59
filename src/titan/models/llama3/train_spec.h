#pragma once
#include "titan/models/registry.h"

namespace titan::models::llama3 {

// What the registry holds under "llama3": builds a Transformer from the [model] section (flavor,
// vocab override, attention path) and sizes a flavor without building it.
TrainSpec train_spec();

}  // namespace titan::models::llama3
