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
//
// A block's tensors that do not require grad (an MoE router's expert bias, a buffer) are read per
// block alike and get no gradient.
//
// What a block hands to code after the blocks besides its output (an MoE layer's expert counts and
// its part of the load-balancing loss), which the loop must carry out of its body: take() removes
// the values the block just left where it reports them, give(i, values) puts block i's there.
// Unrolled, neither is called, as each block leaves its own. In the loop, take() runs after the
// body's writing of the block (block 0's code on row i of the weights) and gives values of the body,
// which the loop stacks [n, ...]; then give(i, row i of each stack) for every block, in order. A
// value that is not of the program (a count the capture knows) is given as it is to every block.
// The backward's second writing of the block runs its code again: a block must not report twice in
// one forward (an MoE layer reports on its first run of a pass only).
struct BlockOutputs {
  std::function<std::vector<Tensor>()> take = nullptr;
  std::function<void(size_t, std::vector<Tensor>)> give = nullptr;
};

Tensor scan_blocks(const Tensor& x, const std::vector<std::vector<Tensor>>& blocks,
                   const std::function<Tensor(size_t, const Tensor&)>& run, const BlockOutputs& outputs = {});

}  // namespace titan::autograd
