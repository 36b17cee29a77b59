#pragma once
// How graph mode runs a model's dropless MoE layers: their group sizes are data of the program,
// which only titan's grouped GEMM takes (a custom call). Without custom kernels every expert
// computes on room for every token: static shapes at experts / top_k times the dropless layer's
// expert products. The trainer and graph mode's generator choose alike.
#include <optional>
#include <string>

#include "titan/nn/module.h"

namespace titan::train {

// Gives `model`'s dropless MoE layers the capacity dispatcher when `custom_kernels` is off.
// Returns the start-up log's line about the layout chosen, or nothing for a model without such
// layers.
std::optional<std::string> prepare_graph_moe(nn::Module& model, bool custom_kernels);

}  // namespace titan::train
