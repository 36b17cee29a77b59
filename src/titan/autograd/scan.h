#pragma once
// Identical blocks as one loop in a captured step (graph mode). Instead of recording every
// layer's ops, the program records the first block once, inside a stablehlo.while over the
// layers' stacked weights, so that the program, and the time XLA takes to compile it, do not grow
// with depth. Its backward is a second loop that writes the block again and differentiates it.
// What that second writing computes again is the program's graph::ScanSaves: the forward loop
// keeps each block's input and, by that policy, the results of its costly ops or of all its ops,
// stacked per layer; the backward's writing takes them op by op instead of computing them
// (activation checkpointing when it keeps the inputs only: one block's activations alive at a
// time, for a third more compute).
#include <functional>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

// blocks[i]: block i's parameters, in one order for every block. run(i, x) applies block i to x;
// it must compute the same function of (x, blocks[i]) for every i, reading block i's parameters
// through the tensors in blocks[i]. `run` is kept for backward, which re-runs it: what it refers to
// must outlive the backward (capture by value).
//
// Loops when x is a value of a captured program that asks for it (graph::Program::scan_layers)
// and every block's parameters match the first's in shape and dtype; otherwise applies the blocks
// one after the other, as eager mode does. The loop reads each kind of parameter stacked: the
// value the blocks' parameters are rows 0..n-1 of (graph::Program::row: graph mode's stacked
// training state), else their concatenation; backward hands back the blocks' gradients as rows of
// the stacked gradients, so that a stacked update can take them whole.
Tensor scan_blocks(const Tensor& x, const std::vector<std::vector<Tensor>>& blocks,
                   const std::function<Tensor(size_t, const Tensor&)>& run);

}  // namespace titan::autograd
