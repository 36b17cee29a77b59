#include "titan/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/kernels/cpu/elementwise.h"

namespace titan::autograd {

namespace {

struct Pending {
  std::vector<Tensor> buffer;
  int deps = 0;
};

void add_into(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  Tensor sum = Tensor::empty(slot.sizes(), slot.options());
  kernels::cpu::binary(kernels::cpu::BinaryOp::add, slot, g, sum);
  slot = sum;
}

// Runs the graph below `roots`. When `capture` is given, the gradients arriving at those leaf
// accumulators are returned through it instead of being accumulated.
void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
         std::unordered_map<Node*, Tensor>* capture) {
  TITAN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(),
              " gradients");
  NoGradGuard no_grad;
  std::unordered_map<Node*, Pending> pending;
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    TITAN_CHECK(roots[i].requires_grad(), "backward: tensor ", roots[i].desc(),
                " does not require grad (no input of the ops that made it requires grad)");
    TITAN_CHECK(grads[i].sizes() == roots[i].sizes(), "backward: gradient ", grads[i].desc(),
                " does not match its tensor ", roots[i].desc());
    Edge e = gradient_edge(roots[i]);
    Pending& p = pending[e.node.get()];
    p.buffer.resize(e.node->output_shapes.size());
    add_into(p.buffer[e.input_nr], grads[i]);
    root_nodes.push_back(e.node);
  }

  // Count, for each node, how many edges lead into it from the part of the graph we will run.
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& n : root_nodes)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      pending[e.node.get()].deps++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)>
      ready(later_first);
  std::unordered_set<Node*> queued;
  for (auto& n : root_nodes)
    if (pending[n.get()].deps == 0 && queued.insert(n.get()).second) ready.push(n);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(pending[node.get()].buffer);
    pending.erase(node.get());
    in.resize(node->output_shapes.size());
    for (size_t i = 0; i < in.size(); ++i)
      if (!in[i].defined())
        in[i] = Tensor::zeros(node->output_shapes[i], {.dtype = node->output_dtypes[i]});
    for (auto& [idx, hook] : node->output_hooks) {
      Tensor r = hook(in[idx]);
      if (r.defined()) in[idx] = r;
    }
    if (capture) {
      auto it = capture->find(node.get());
      if (it != capture->end()) {
        it->second = in[0];
        continue;
      }
    }
    std::vector<bool> needs(node->next_edges.size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = node->next_edges[i].valid();
    std::vector<Tensor> out = node->apply(GradContext{in, needs});
    in.clear();
    if (!retain_graph) node->release();
    TITAN_CHECK(out.size() == node->next_edges.size() || node->next_edges.empty(), "autograd: ",
                node->name(), " returned ", out.size(), " gradients for ", node->next_edges.size(),
                " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      Pending& p = pending[e.node.get()];
      if (out[i].defined()) {
        const Shape& want = e.node->output_shapes[e.input_nr];
        TITAN_CHECK(out[i].sizes() == want, "autograd: ", node->name(), " produced gradient ",
                    out[i].desc(), " for input ", i, ", expected shape ", shape_str(want));
        p.buffer.resize(e.node->output_shapes.size());
        add_into(p.buffer[e.input_nr], out[i]);
      }
      if (--p.deps == 0 && queued.insert(e.node.get()).second) ready.push(e.node);
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  run(roots, grads, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  std::unordered_map<Node*, Tensor> capture;
  std::vector<Node*> order;
  std::vector<std::shared_ptr<Node>> keep_alive;  // accumulators made here exist only through us
  for (const Tensor& in : inputs) {
    TITAN_CHECK(in.requires_grad() && in.is_leaf(), "autograd::grad: input ", in.desc(),
                " must be a leaf that requires grad");
    Edge e = gradient_edge(in);
    capture[e.node.get()] = Tensor();
    order.push_back(e.node.get());
    keep_alive.push_back(e.node);
  }
  run(outputs, grad_outputs, retain_graph, &capture);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = capture[order[i]];
    result.push_back(g.defined() ? g : Tensor::zeros(inputs[i].sizes(), inputs[i].options()));
  }
  return result;
}

}  // namespace titan::autograd
