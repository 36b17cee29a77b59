#pragma once
#include "titan/models/registry.h"

namespace titan::models::qwen3 {

// What the registry holds under "qwen3" (dense) and "qwen3_moe": builds a Transformer from the
// [model] section (flavor, vocab and tying overrides, attention path) and the [moe] section, and
// sizes a flavor without building it.
TrainSpec dense_train_spec();
TrainSpec moe_train_spec();

}  // namespace titan::models::qwen3
