#pragma once
// Graph mode's training state laid out so that the step does not grow with depth: the parameters a
// loop over identical blocks reads (autograd/scan.h), "layers.<i>.<rest>" (or another list's) for every layer i with
// one shape, dtype and weight-decay setting, are kept with both of AdamW's moments as one stacked
// device buffer [L, ...] each, updated by one AdamW on the stack; any other parameter is kept
// alone. The host copies (the model's tensors, the optimizer's state, checkpoints) stay per layer.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"
#include "titan/optim/adamw.h"

namespace titan::train {

// One buffer of the state: a stack of layers' parameters, or one parameter.
struct StateSlot {
  std::string name = {};             // the parameter's, or "layers.*.<rest>" for a stack
  std::vector<size_t> members = {};  // indices into the parameters; a stack's in layer order
  bool stacked = false;
  Shape shape = {};  // the buffer's: [L, ...] for a stack
};

// `params` as slots, in the order of their first members. Stacks when `stack_layers` (a loop will
// read the stacks whole) and a kind of layer parameter ("<list>.<i>.<rest>" for a list of
// `layer_lists`; one kind per list and rest) has at least two layers, numbered 0..L-1, all of one
// shape, dtype and decay; its parameters stay alone otherwise.
std::vector<StateSlot> plan_state(const std::vector<std::pair<std::string, Tensor>>& params,
                                  const optim::AdamW& optimizer, bool stack_layers,
                                  const std::vector<std::string>& layer_lists = {"layers"});

// The slot's buffer on the host: `of(m)` for each member m, stacked along a new first dim if the
// slot is a stack.
template <class Of>
Tensor gather_slot(const StateSlot& slot, Of of) {
  if (!slot.stacked) return of(slot.members[0]);
  const Tensor first = of(slot.members[0]);
  Tensor out = Tensor::empty(slot.shape, {.dtype = first.dtype()});
  for (size_t i = 0; i < slot.members.size(); ++i)
    out.narrow(0, static_cast<int64_t>(i), 1).copy_(of(slot.members[i]));
  return out;
}

// Member i's part of a slot's buffer brought to the host: row i of a stack, the buffer itself
// otherwise. A view of `buffer`.
Tensor member_of(const StateSlot& slot, const Tensor& buffer, size_t i);

// The gradient of a slot's buffer in the step being captured, once backward has run: for a stack,
// the stacked value its members' gradients are rows 0..L-1 of (a loop's backward gives them so),
// or else their concatenation (blocks run one by one, gradient accumulation).
graph::Value slot_gradient(const StateSlot& slot, const std::vector<std::pair<std::string, Tensor>>& params);

}  // namespace titan::train
