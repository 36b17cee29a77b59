#include "titan/autograd/checkpoint.h"

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/core/autocast.h"

namespace titan::autograd {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& body, const Tensor& x,
                  const std::vector<Generator*>& generators) {
  if (!grad_enabled()) return body(x);
  std::vector<uint64_t> start_offsets;
  // The re-run multiplies in the precision the forward did, whatever autocast is in backward.
  const DType autocast = autocast_dtype();
  for (Generator* g : generators) start_offsets.push_back(g->offset());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = body(x);
  }
  TITAN_CHECK(out.defined(), "checkpoint: the body returned an undefined tensor");
  // A fresh handle: the body may have returned x or a tensor it captured, whose history is theirs.
  out = out.detach();
  Shape shape = out.sizes();

  // record() makes a node only when an input requires grad, but the body's parameters count too
  // and are unknown until it is re-run: a zero-element leaf stands in so that the node always
  // exists, and its edge is dropped at once. The node's one edge, to x, makes x's producer wait
  // for it; every gradient itself travels through backward_rebuilt.
  Tensor stand_in = Tensor::empty({0}).requires_grad_();
  record(
      "checkpoint", {x, stand_in}, {out},
      [body, x, generators, start_offsets, shape, autocast](const GradContext& ctx) -> std::vector<Tensor> {
        std::vector<uint64_t> now;
        for (size_t i = 0; i < generators.size(); ++i) {
          now.push_back(generators[i]->offset());
          generators[i]->set_offset(start_offsets[i]);
        }
        Tensor rebuilt;
        {
          // Backward runs with grad mode off; the re-run must record a graph to go back through.
          const GradModeGuard recording(true);
          const AutocastGuard same_precision(autocast);
          rebuilt = body(x);
        }
        for (size_t i = 0; i < generators.size(); ++i) generators[i]->set_offset(now[i]);
        TITAN_CHECK(rebuilt.defined() && rebuilt.sizes() == shape, "checkpoint: the body returned ",
                    rebuilt.defined() ? rebuilt.desc() : std::string("an undefined tensor"),
                    " when re-run in backward but shape ", shape_str(shape),
                    " in forward; a checkpointed body must compute the same function both times");
        backward_rebuilt({rebuilt}, {ctx[0]});
        return {Tensor()};
      });
  out.grad_fn()->next_edges.pop_back();
  out.grad_fn()->rebuilds_graph = true;
  return out;
}

}  // namespace titan::autograd
