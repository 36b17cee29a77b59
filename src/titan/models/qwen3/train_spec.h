#pragma once
#include "titan/models/registry.h"

namespace titan::models::qwen3 {

// What the registry holds under "qwen3" (dense) and "qwen3_moe": builds a Transformer from the
// [model] section (flavor, vocab and tying overrides, attention path) and the [moe] section,
// sizes a flavor without building it, and maps its weights to and from Hugging Face's
// Qwen3ForCausalLM / Qwen3MoeForCausalLM (state_dict_adapter).
TrainSpec dense_train_spec();
TrainSpec moe_train_spec();

}  // namespace titan::models::qwen3
