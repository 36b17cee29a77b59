#pragma once
// A tensor-parallel plan's layout of an activation, for graph mode over several devices: `x` held
// split along `split_dim` over the tp devices (nullopt: whole on each), as the captured program's
// mesh lays it out (graph::Program::set_activation_layout), and its gradient held alike. A
// sharding constraint for XLA's partitioner, so that Megatron's plan is what it compiles (the
// weights' shardings alone leave the activations to its propagation, which may split them
// elsewhere and gather them back). The identity in eager mode and in a program without a layout.
#include <cstdint>
#include <optional>

#include "titan/core/tensor.h"

namespace titan::ops {

Tensor keep_layout(const Tensor& x, std::optional<int64_t> split_dim);

}  // namespace titan::ops
