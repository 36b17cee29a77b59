#pragma once
// The transformer's blocks [first, last) applied in turn: as a loop over their stacked weights
// when the step is being captured for graph mode (autograd/scan.h), one by one otherwise.
#include <cstdint>
#include <vector>

#include "titan/autograd/scan.h"
#include "titan/nn/module.h"

namespace titan::models::common {

// `apply(block, x)`: what one block does to the hidden states. It is kept for backward (a loop
// re-runs it), so it holds what it needs by value. A block reads its parameters and its buffers
// (an MoE router's expert bias), each its own in a loop too.
//
// `take(block)` and `give(block, values)`: what a block reports besides its output, which a loop
// carries out of its body (autograd::BlockOutputs): take from the block whose code the loop ran,
// give to each block its own.
template <class Block, class Apply, class Take, class Give>
Tensor run_blocks(nn::ModuleList<Block>& layers, int64_t first, int64_t last, const Tensor& h, Apply apply,
                  Take take, Give give) {
  std::vector<std::vector<Tensor>> tensors;
  for (int64_t i = first; i < last; ++i) {
    tensors.emplace_back();
    const Block& block = layers[static_cast<size_t>(i)];
    for (const auto& [name, p] : block.named_parameters()) tensors.back().push_back(p);
    for (const auto& [name, b] : block.named_buffers()) tensors.back().push_back(b);
  }
  const autograd::BlockOutputs outputs{
      .take = [&layers, first, take] { return take(layers[static_cast<size_t>(first)]); },
      .give =
          [&layers, first, give](size_t i, std::vector<Tensor> values) {
            give(layers[static_cast<size_t>(first) + i], std::move(values));
          }};
  return autograd::scan_blocks(
      h, tensors,
      [&layers, first, apply](size_t i, const Tensor& x) {
        return apply(layers[static_cast<size_t>(first) + i], x);
      },
      outputs);
}

// Blocks that report nothing besides their output.
template <class Block, class Apply>
Tensor run_blocks(nn::ModuleList<Block>& layers, int64_t first, int64_t last, const Tensor& h, Apply apply) {
  return run_blocks(
      layers, first, last, h, apply, [](Block&) { return std::vector<Tensor>{}; },
      [](Block&, std::vector<Tensor>) {});
}

}  // namespace titan::models::common
