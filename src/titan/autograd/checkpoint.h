#pragma once
// Activation checkpointing: trade compute for memory by keeping only a block's input and running
// the block again in backward to rebuild what its backward needs.
#include <functional>
#include <vector>

#include "titan/core/rng.h"
#include "titan/core/tensor.h"

namespace titan::autograd {

// body(x), run without recording: no activation inside the body is kept, only `x` (and what the
// body captures). In backward the body runs again on `x`, recording this time, and the incoming
// gradient flows through the rebuilt graph (backward_rebuilt): gradients for `x`, for parameters
// and for any other tensor the body reads arrive where they would without checkpointing, in the
// same order, so they are bit-identical; leaf hooks (post-accumulate, FSDP's) run once per
// backward; autograd::grad works through it; checkpoints nest.
//
// The result requires grad whenever grad mode is on (the body's parameters are not known until it
// is re-run); with grad mode off this is just body(x).
//
// The body is called a second time during backward, so:
//  - it must compute the same function: whatever it captures must still exist, unchanged, when
//    backward runs (capture by value what does not outlive the step: masks, tables built per step);
//  - its side effects happen twice (module hooks inside it, counters);
//  - random numbers: titan's Generators are explicit objects whose offset advances with every draw,
//    so a re-run would draw fresh numbers. Pass every generator the body draws from in
//    `generators`: their offsets are rewound to where the first run started for the re-run and put
//    back after it (each must outlive the backward). A body may instead reserve its offsets
//    outside and capture them by value.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& body, const Tensor& x,
                  const std::vector<Generator*>& generators = {});

}  // namespace titan::autograd
