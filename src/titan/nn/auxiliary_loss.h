#pragma once
// Auxiliary losses computed inside a forward pass (a mixture-of-experts router's load-balancing
// loss) that the caller adds to its objective.
//
// A term cannot send its gradient back along its own graph: activation checkpointing runs a block
// without recording, so a term computed there has no graph until the block is re-run in backward,
// long after the caller added the term to its loss. Instead each term is attached to an output of
// the module that computed it, whose graph checkpointing does rebuild: attach(out, term) returns
// `out` unchanged and, in backward, hands `term` the gradient that reached total(), times its
// weight. That gradient is known in time because total() is recorded after the whole forward and
// the engine runs nodes in decreasing creation order, so total()'s node runs before any node of
// the forward it sums.
//
// A handle: copies share the terms, so a block body captured by value (checkpointing) reports into
// the same set. Make one per forward pass.
#include <cstdint>
#include <functional>
#include <memory>

#include "titan/core/tensor.h"

namespace titan::nn {

class AuxiliaryLosses {
 public:
  AuxiliaryLosses();

  // `out` (a new handle to the same data) whose backward also sends weight * dL/d(total) to
  // `term`, a one-element tensor with the graph of what it was computed from. Counts
  // weight * term towards total() under `key`: a second attach under one key (the forward re-run
  // by activation checkpointing, or by a layer loop's backward) only sends the gradient; the term
  // counted is the first's.
  Tensor attach(const Tensor& out, const Tensor& term, double weight, int64_t key);

  // As above for a term of any shape whose weights depend on what the rest of the forward does
  // (a loss pooled over all layers weighs each layer's term by every layer's choices): the term
  // counts as sum(weigh(term)), where weigh(x), linear in x, multiplies x by the weights; backward
  // hands the term weigh(g) for the 0-d gradient g of total(), which must broadcast to the term's
  // shape. weigh is called only in total() and in backward, after the whole forward. All of it
  // is tensor arithmetic, so the terms may live on any device (a captured step's included).
  Tensor attach(const Tensor& out, const Tensor& term, std::function<Tensor(const Tensor& x)> weigh,
                int64_t key);

  // A layer loop (autograd/scan.h) runs one layer's code for every layer, inside its body: take()
  // removes the term under `key` and returns it (a value of the body), and count() counts each
  // layer's (rows of the loop's stack, weighed as attach's) under that layer's key, replacing any.
  // The gradient reaches the terms through attach in the backward's writing of the layer.
  Tensor take(int64_t key);
  void count(const Tensor& term, std::function<Tensor(const Tensor& x)> weigh, int64_t key);

  // The sum of the weighted terms over the keys, a 0-d tensor of the terms' dtype (f32 when none
  // was attached). With grad mode on it carries a node whose gradient reaches every attached term,
  // also those attached later by a re-run; add it to the loss once the forward is done. Call it once
  // per forward: each call's node hands its own gradient to the terms, the last one run wins.
  Tensor total() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace titan::nn
