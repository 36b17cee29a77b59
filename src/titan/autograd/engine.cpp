#include "titan/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/core/memory_owner.h"
#include "titan/core/trace.h"
#include "titan/kernels/cpu/elementwise.h"

namespace titan::autograd {

namespace {

struct Pending {
  std::vector<Tensor> buffer;
  int deps = 0;
};

// The shapes of a node's gradients for a trace; [] where none was computed.
std::vector<Shape> shapes_of(const std::vector<Tensor>& grads) {
  std::vector<Shape> shapes;
  for (const Tensor& g : grads) shapes.push_back(g.defined() ? g.sizes() : Shape{});
  return shapes;
}

void add_into(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  Tensor sum = Tensor::empty(slot.sizes(), slot.options());
  kernels::cpu::binary(kernels::cpu::BinaryOp::add, slot, g, sum);
  slot = sum;
}

// Later nodes first. Every edge points from a node to an older one, so this runs each node after
// all its consumers: nodes leave the queue in strictly decreasing sequence_nr, which is what lets
// a rebuilt graph hand gradients to its enclosing pass before their destinations run. Leaf
// accumulators carry sequence_nr 0, as the first node ever recorded does; on that tie the node
// with inputs goes first, since it may still send the leaf a gradient. In a graph that rebuilds
// nothing a leaf's accumulator does not wait in the queue: it runs as soon as its last
// contribution arrives, so that hooks on accumulated gradients (data parallelism's reductions)
// fire while the rest of backward still runs.
bool runs_after(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
  if (a->sequence_nr != b->sequence_nr) return a->sequence_nr < b->sequence_nr;
  return a->next_edges.empty() && !b->next_edges.empty();
}

// One backward pass. A pass started by backward_rebuilt() owns only the nodes recorded after the
// node that started it (those the rebuilt forward made); a gradient leaving them goes to the
// enclosing pass, which owns the rest of the graph.
class GraphTask {
 public:
  GraphTask(bool retain_graph, std::unordered_map<Node*, Tensor>* capture, GraphTask* parent,
            uint64_t first_owned)
      : retain_graph_(retain_graph), capture_(capture), parent_(parent), first_owned_(first_owned) {}

  void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);
  const Node* running() const { return running_; }

 private:
  bool owns(const Node* n) const { return n->sequence_nr >= first_owned_; }
  void deliver(const Edge& e, const Tensor& g);
  void count_below(Node* n);
  void add_to_buffer(const Edge& e, const Tensor& g, const char* from);
  void execute(const std::shared_ptr<Node>& node);
  void push(const std::shared_ptr<Node>& n) {
    if (queued_.insert(n.get()).second) ready_.push(n);
  }

  bool retain_graph_;
  // When given, gradients reaching these leaf accumulators are returned through it instead of
  // accumulated.
  std::unordered_map<Node*, Tensor>* capture_;
  GraphTask* parent_;
  uint64_t first_owned_;
  const Node* running_ = nullptr;
  // Whether leaves accumulate as soon as complete: false once the pass has seen a node that
  // rebuilds a graph, whose gradients may reach a leaf after its counted ones have.
  bool eager_leaves_ = true;
  std::unordered_map<Node*, Pending> pending_;
  std::unordered_set<Node*> seen_;
  std::unordered_set<Node*> queued_;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(&runs_after)>
      ready_{&runs_after};
};

// The pass running on this thread: a node's backward that rebuilds its graph hands the gradients
// leaving that graph back to it.
thread_local GraphTask* t_current = nullptr;

// Counts, for each node below `n`, the edges that lead into it from the part of the graph this
// pass runs.
void GraphTask::count_below(Node* n) {
  std::vector<Node*> stack{n};
  while (!stack.empty()) {
    Node* top = stack.back();
    stack.pop_back();
    if (top->rebuilds_graph) eager_leaves_ = false;
    for (const Edge& e : top->next_edges) {
      if (!e.valid() || !owns(e.node.get())) continue;
      pending_[e.node.get()].deps++;
      if (seen_.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
}

void GraphTask::add_to_buffer(const Edge& e, const Tensor& g, const char* from) {
  const Shape& want = e.node->output_shapes[e.input_nr];
  TITAN_CHECK(g.sizes() == want, "autograd: ", from, " produced gradient ", g.desc(), " for ", e.node->name(),
              ", expected shape ", shape_str(want));
  auto it = pending_.find(e.node.get());
  TITAN_CHECK(it != pending_.end(), "autograd: a gradient for ", e.node->name(),
              " arrived after it ran; a checkpointed body must compute the same function when it is "
              "re-run in backward (it read a tensor made after it was first called)");
  it->second.buffer.resize(e.node->output_shapes.size());
  add_into(it->second.buffer[e.input_nr], g);
}

// A gradient arriving along an edge that no dependency count covers: a root's seed, or one that
// left a rebuilt graph. A node seen for the first time joins this pass with what lies below it;
// it is ready at once, and runs after everything newer, which includes all its consumers. A leaf
// that joins this way may be sent more from later rebuilt graphs; it can wait for them only
// because leaf accumulators run last (sequence_nr 0).
void GraphTask::deliver(const Edge& e, const Tensor& g) {
  if (!owns(e.node.get())) {
    parent_->deliver(e, g);
    return;
  }
  if (seen_.insert(e.node.get()).second) {
    pending_[e.node.get()];
    count_below(e.node.get());
    push(e.node);
  }
  add_to_buffer(e, g, "a gradient passed in");
}

void GraphTask::run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  TITAN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(),
              " gradients");
  for (size_t i = 0; i < roots.size(); ++i) {
    TITAN_CHECK(roots[i].requires_grad(), "backward: tensor ", roots[i].desc(),
                " does not require grad (no input of the ops that made it requires grad)");
    TITAN_CHECK(grads[i].sizes() == roots[i].sizes(), "backward: gradient ", grads[i].desc(),
                " does not match its tensor ", roots[i].desc());
    deliver(gradient_edge(roots[i]), grads[i]);
  }

  while (!ready_.empty()) {
    std::shared_ptr<Node> node = ready_.top();
    ready_.pop();
    execute(node);
  }
}

void GraphTask::execute(const std::shared_ptr<Node>& node) {
  auto it = pending_.find(node.get());
  TITAN_CHECK(it->second.deps == 0, "autograd: internal error: ", node->name(),
              " was scheduled before all its consumers ran");
  std::vector<Tensor> in = std::move(it->second.buffer);
  pending_.erase(it);
  in.resize(node->output_shapes.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i].defined()) in[i] = Tensor::zeros(node->output_shapes[i], {.dtype = node->output_dtypes[i]});
  for (auto& [idx, hook] : node->output_hooks) {
    Tensor r = hook(in[idx]);
    if (r.defined()) in[idx] = r;
  }
  if (capture_) {
    auto cap = capture_->find(node.get());
    if (cap != capture_->end()) {
      cap->second = in[0];
      return;
    }
  }
  std::vector<bool> needs(node->next_edges.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = node->next_edges[i].valid();
  running_ = node.get();
  std::vector<Tensor> out;
  {
    // Named only when recorded: the name is a virtual call and a string.
    trace::Span span("backward", "backward");
    if (span.active()) span.rename(node->name());
    out = node->apply(GradContext{in, needs});
    if (span.active()) span.arg("grads_in", node->output_shapes).arg("grads_out", shapes_of(out));
  }
  running_ = nullptr;
  in.clear();
  if (!retain_graph_) node->release();
  TITAN_CHECK(out.size() == node->next_edges.size() || node->next_edges.empty(), "autograd: ", node->name(),
              " returned ", out.size(), " gradients for ", node->next_edges.size(), " inputs");
  for (size_t i = 0; i < node->next_edges.size(); ++i) {
    const Edge& e = node->next_edges[i];
    if (!e.valid()) continue;
    if (!owns(e.node.get())) {
      if (out[i].defined()) parent_->deliver(e, out[i]);
      continue;
    }
    if (out[i].defined()) add_to_buffer(e, out[i], node->name().c_str());
    if (--pending_[e.node.get()].deps > 0) continue;
    if (eager_leaves_ && e.node->next_edges.empty() && queued_.insert(e.node.get()).second)
      execute(e.node);
    else
      push(e.node);
  }
}

// Runs `task` as this thread's current pass, with grad mode off (backward formulas record nothing).
// What backward allocates is workspace unless a node or a module it re-runs says otherwise.
void run_task(GraphTask& task, const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  struct Current {
    GraphTask* prev;
    explicit Current(GraphTask* t) : prev(t_current) { t_current = t; }
    ~Current() { t_current = prev; }
  } current(&task);
  NoGradGuard no_grad;
  MemoryOwnerScope owner(MemoryCategory::workspace);
  task.run(roots, grads);
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  GraphTask task(retain_graph, nullptr, nullptr, 0);
  run_task(task, roots, grads);
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
  GraphTask task(retain_graph, &capture, nullptr, 0);
  run_task(task, outputs, grad_outputs);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = capture[order[i]];
    result.push_back(g.defined() ? g : Tensor::zeros(inputs[i].sizes(), inputs[i].options()));
  }
  return result;
}

void backward_rebuilt(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads) {
  GraphTask* parent = t_current;
  TITAN_CHECK(parent != nullptr && parent->running() != nullptr,
              "backward_rebuilt: called outside a backward; only a node's backward (apply) may "
              "call it, for the graph it rebuilt");
  TITAN_CHECK(outputs.size() == grads.size(), "backward_rebuilt: ", outputs.size(), " outputs but ",
              grads.size(), " gradients");
  std::vector<Tensor> roots, seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].requires_grad()) continue;
    roots.push_back(outputs[i]);
    seeds.push_back(grads[i]);
  }
  // The rebuilt graph is made afresh for every backward, so it is freed as it is consumed.
  GraphTask task(/*retain_graph=*/false, nullptr, parent, parent->running()->sequence_nr + 1);
  run_task(task, roots, seeds);
}

}  // namespace titan::autograd
