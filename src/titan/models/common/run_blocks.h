#pragma once
// The transformer's blocks [first, last) applied in turn: as a loop over their stacked weights
// when the step is being captured for graph mode (autograd/scan.h), one by one otherwise.
#include <cstdint>
#include <vector>

#include "titan/autograd/scan.h"
#include "titan/nn/module.h"

namespace titan::models::common {

// `apply(block, x)`: what one block does to the hidden states. It is kept for backward (a loop
// re-runs it), so it holds what it needs by value.
template <class Block, class Apply>
Tensor run_blocks(nn::ModuleList<Block>& layers, int64_t first, int64_t last, const Tensor& h, Apply apply) {
  std::vector<std::vector<Tensor>> params;
  for (int64_t i = first; i < last; ++i) {
    params.emplace_back();
    for (const auto& [name, p] : layers[static_cast<size_t>(i)].named_parameters()) params.back().push_back(p);
  }
  return autograd::scan_blocks(h, params, [&layers, first, apply](size_t i, const Tensor& x) {
    return apply(layers[static_cast<size_t>(first) + i], x);
  });
}

}  // namespace titan::models::common
