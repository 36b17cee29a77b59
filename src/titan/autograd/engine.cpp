#include "titan/autograd/engine.h"
#include "titan/graph/lazy.h"

#include <algorithm>
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
  if (slot.is_lazy() || g.is_lazy()) {
    slot = graph::add(slot, g);
    return;
  }
  Tensor sum = Tensor::empty(slot.sizes(), slot.options());
  kernels::cpu::binary(kernels::cpu::BinaryOp::add, slot, g, sum);
  slot = sum;
}

// Adds `g`, sent along `e` by `from`, into the gradient buffer of e's node.
void add_gradient(std::vector<Tensor>& buffer, const Edge& e, const Tensor& g, const std::string& from) {
  const Shape& want = e.node->output_shapes[e.input_nr];
  TITAN_CHECK(g.sizes() == want, "autograd: ", from, " produced gradient ", g.desc(), " for ", e.node->name(),
              ", expected shape ", shape_str(want));
  buffer.resize(e.node->output_shapes.size());
  add_into(buffer[e.input_nr], g);
}

// A node's gradients as its backward takes them: zeros where none flowed, then its output hooks.
void complete(Node& node, std::vector<Tensor>& in) {
  in.resize(node.output_shapes.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i].defined())
      in[i] = graph::current_program_or_null() ? graph::full(node.output_shapes[i], 0.0, node.output_dtypes[i])
                                               : Tensor::zeros(node.output_shapes[i], {.dtype = node.output_dtypes[i]});
  for (auto& [idx, hook] : node.output_hooks) {
    Tensor r = hook(in[idx]);
    if (r.defined()) in[idx] = r;
  }
}

std::vector<Tensor> apply_node(Node& node, const std::vector<Tensor>& in, const std::vector<bool>& needs) {
  std::vector<Tensor> out;
  {
    // Named only when recorded: the name is a virtual call and a string.
    trace::Span span("backward", "backward");
    if (span.active()) span.rename(node.name());
    out = node.apply(GradContext{in, needs});
    if (span.active()) span.arg("grads_in", node.output_shapes).arg("grads_out", shapes_of(out));
  }
  TITAN_CHECK(out.size() == node.next_edges.size() || node.next_edges.empty(), "autograd: ", node.name(),
              " returned ", out.size(), " gradients for ", node.next_edges.size(), " inputs");
  return out;
}

// What the passes of a split backward share (a checkpointed block's pass splits as the pass
// around it does): which leaves are inputs, and the nodes held for W, in the order reached.
struct Split {
  const std::unordered_map<Node*, Tensor>* inputs = nullptr;
  std::vector<DeferredWeightGrads::Held>* held = nullptr;

  // See engine.h. A chain of one-edge nodes ends at a leaf or at a node that is none. (A node
  // with no inputs, as AuxiliaryLosses's total, is no leaf: its backward must run in B.)
  bool is_weight(Node* n) const {
    while (!is_leaf(n)) {
      if (n->rebuilds_graph) return false;
      Node* only = nullptr;
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        if (only) return false;
        only = e.node.get();
      }
      if (!only) return false;
      n = only;
    }
    return !inputs->contains(n);
  }
  static bool is_leaf(const Node* n) { return dynamic_cast<const AccumulateGrad*>(n) != nullptr; }
  bool is_weight_leaf(Node* n) const { return is_leaf(n) && is_weight(n); }
  std::vector<bool> weight_edges(const Node& node) const {
    std::vector<bool> w(node.next_edges.size());
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = node.next_edges[i].valid() && is_weight(node.next_edges[i].node.get());
    return w;
  }
};

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
// enclosing pass, which owns the rest of the graph. In a split backward's B, what would flow
// along weight edges is left for W, and the nodes W needs are held in the order they run.
class GraphTask {
 public:
  GraphTask(bool retain_graph, std::unordered_map<Node*, Tensor>* capture, GraphTask* parent,
            uint64_t first_owned, const Split* split)
      : retain_graph_(retain_graph),
        capture_(capture),
        parent_(parent),
        first_owned_(first_owned),
        split_(split) {}

  void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);
  // release_leaves' work, in the pass that owns leaves (the outermost).
  void release(const std::shared_ptr<Node>& leaf);
  const Node* running() const { return running_; }
  const Split* split() const { return split_; }

 private:
  bool owns(const Node* n) const { return n->sequence_nr >= first_owned_; }
  void deliver(const Edge& e, const Tensor& g);
  void count_below(Node* n);
  void add_to_buffer(const Edge& e, const Tensor& g, const std::string& from);
  void execute(const std::shared_ptr<Node>& node);
  void pass_over(const Edge& e);
  void finished_consumer(const Edge& e);
  void push(const std::shared_ptr<Node>& n) {
    if (queued_.insert(n.get()).second) ready_.push(n);
  }

  bool retain_graph_;
  // When given, gradients reaching these leaf accumulators are returned through it instead of
  // accumulated.
  std::unordered_map<Node*, Tensor>* capture_;
  GraphTask* parent_;
  uint64_t first_owned_;
  // Set in a split backward's passes: gradients along weight edges wait for W.
  const Split* split_;
  const Node* running_ = nullptr;
  // Whether leaves accumulate as soon as complete: false once the pass has seen a node that
  // rebuilds a graph, whose gradients may reach a leaf after its counted ones have.
  bool eager_leaves_ = true;
  // Leaves release() let accumulate as soon as complete, and those it ran out of the queue's order
  // (skipped when the queue reaches them).
  std::unordered_set<Node*> released_;
  std::unordered_set<Node*> ran_early_;
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
      if (!e.valid() || !owns(e.node.get()) || (split_ && split_->is_weight_leaf(e.node.get()))) continue;
      pending_[e.node.get()].deps++;
      if (seen_.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
}

// An undefined `g` adds nothing: a weight edge's gradient, which W will send.
void GraphTask::add_to_buffer(const Edge& e, const Tensor& g, const std::string& from) {
  auto it = pending_.find(e.node.get());
  TITAN_CHECK(it != pending_.end(), "autograd: a gradient for ", e.node->name(),
              " arrived after it ran; a checkpointed body must compute the same function when it is "
              "re-run in backward (it read a tensor made after it was first called)");
  if (g.defined()) add_gradient(it->second.buffer, e, g, from);
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
    if (ran_early_.erase(node.get()) == 0) execute(node);
  }
}

void GraphTask::release(const std::shared_ptr<Node>& leaf) {
  if (parent_) {
    parent_->release(leaf);
    return;
  }
  if (split_ && split_->is_weight_leaf(leaf.get())) return;  // W accumulates those
  auto it = pending_.find(leaf.get());
  if (it == pending_.end()) return;  // no gradient yet (it accumulates at the end), or done
  if (it->second.deps > 0) {
    released_.insert(leaf.get());
    return;
  }
  if (queued_.contains(leaf.get())) ran_early_.insert(leaf.get());
  queued_.insert(leaf.get());
  execute(leaf);
}

void GraphTask::execute(const std::shared_ptr<Node>& node) {
  auto it = pending_.find(node.get());
  TITAN_CHECK(it->second.deps == 0, "autograd: internal error: ", node->name(),
              " was scheduled before all its consumers ran");
  std::vector<Tensor> in = std::move(it->second.buffer);
  pending_.erase(it);
  if (split_ && split_->is_weight(node.get())) {
    // Its gradients come in W; here it only takes its place in the order.
    split_->held->push_back({node, std::move(in), split_->weight_edges(*node), /*weight_node=*/true});
    for (const Edge& e : node->next_edges)
      if (e.valid()) pass_over(e);
    return;
  }
  complete(*node, in);
  if (capture_) {
    auto cap = capture_->find(node.get());
    if (cap != capture_->end()) {
      cap->second = in[0];
      return;
    }
  }
  const std::vector<bool> weight =
      split_ ? split_->weight_edges(*node) : std::vector<bool>(node->next_edges.size());
  std::vector<bool> needs(node->next_edges.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = node->next_edges[i].valid() && !weight[i];
  // A checkpointed block's node splits inside, through its rebuilt graph, and so runs whole now.
  const bool held = !node->rebuilds_graph && std::find(weight.begin(), weight.end(), true) != weight.end();
  std::vector<Tensor> out(node->next_edges.size());
  if (!held || std::find(needs.begin(), needs.end(), true) != needs.end()) {
    running_ = node.get();
    out = apply_node(*node, in, needs);
    running_ = nullptr;
  }
  if (held) {
    split_->held->push_back({node, std::move(in), weight});
  } else {
    in.clear();
    if (!retain_graph_) node->release();
  }
  for (size_t i = 0; i < node->next_edges.size(); ++i) {
    const Edge& e = node->next_edges[i];
    if (!e.valid()) continue;
    if (weight[i]) {
      pass_over(e);
      continue;
    }
    if (!owns(e.node.get())) {
      if (out[i].defined()) parent_->deliver(e, out[i]);
      continue;
    }
    if (out[i].defined()) add_to_buffer(e, out[i], node->name());
    finished_consumer(e);
  }
}

// One consumer of e's node is done with it.
void GraphTask::finished_consumer(const Edge& e) {
  if (--pending_[e.node.get()].deps > 0) return;
  const bool now = eager_leaves_ || released_.contains(e.node.get());
  if (now && e.node->next_edges.empty() && queued_.insert(e.node.get()).second)
    execute(e.node);
  else
    push(e.node);
}

// A weight edge: its gradient waits for W, but a node at its end still takes its place in the
// order of this backward, for W to follow. Weight leaves wait only for W.
void GraphTask::pass_over(const Edge& e) {
  if (Split::is_leaf(e.node.get())) return;
  if (owns(e.node.get()))
    finished_consumer(e);
  else
    parent_->deliver(e, Tensor());
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
  GraphTask task(retain_graph, nullptr, nullptr, 0, nullptr);
  run_task(task, roots, grads);
}

namespace {

// The gradients that reach `inputs` in a pass `run` makes with the map it is given, in order,
// zeros where none did.
template <typename Run>
std::vector<Tensor> captured(const char* caller, const std::vector<Tensor>& inputs, const Run& run) {
  std::unordered_map<Node*, Tensor> capture;
  std::vector<Node*> order;
  std::vector<std::shared_ptr<Node>> keep_alive;  // accumulators made here exist only through us
  for (const Tensor& in : inputs) {
    TITAN_CHECK(in.requires_grad() && in.is_leaf(), caller, ": input ", in.desc(),
                " must be a leaf that requires grad");
    Edge e = gradient_edge(in);
    capture[e.node.get()] = Tensor();
    order.push_back(e.node.get());
    keep_alive.push_back(e.node);
  }
  run(capture);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = capture[order[i]];
    result.push_back(g.defined() ? g : Tensor::zeros(inputs[i].sizes(), inputs[i].options()));
  }
  return result;
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  return captured("autograd::grad", inputs, [&](std::unordered_map<Node*, Tensor>& capture) {
    GraphTask task(retain_graph, &capture, nullptr, 0, nullptr);
    run_task(task, outputs, grad_outputs);
  });
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
  GraphTask task(/*retain_graph=*/false, nullptr, parent, parent->running()->sequence_nr + 1,
                 parent->split());
  run_task(task, roots, seeds);
}

void release_leaves(const std::vector<Tensor>& leaves) {
  if (t_current == nullptr) return;
  for (const Tensor& t : leaves)
    if (t.requires_grad() && t.is_leaf()) t_current->release(gradient_edge(t).node);
}

std::vector<Tensor> backward_split(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                                   const std::vector<Tensor>& inputs, DeferredWeightGrads& deferred) {
  TITAN_CHECK(deferred.empty(), "backward_split: `deferred` still holds ", deferred.held_.size(),
              " nodes of an earlier split backward's weight gradients; run() them first (or use one "
              "DeferredWeightGrads per micro-batch)");
  const trace::Span span("input gradients (B)", "backward");
  return captured("backward_split", inputs, [&](std::unordered_map<Node*, Tensor>& capture) {
    const Split split{.inputs = &capture, .held = &deferred.held_};
    for (const Tensor& root : roots)
      TITAN_CHECK(!root.defined() || !root.is_leaf() || !root.requires_grad() ||
                      capture.contains(gradient_edge(root).node.get()),
                  "backward_split: root ", root.desc(),
                  " is a parameter (a leaf that is not one of the inputs); its gradient is a weight "
                  "gradient with nothing to split: accumulate it with backward()");
    GraphTask task(/*retain_graph=*/false, &capture, nullptr, 0, &split);
    run_task(task, roots, grads);
  });
}

void DeferredWeightGrads::run() {
  const trace::Span span("weight gradients (W)", "backward");
  NoGradGuard no_grad;
  MemoryOwnerScope owner(MemoryCategory::workspace);
  // The gradients flowing into weight nodes, and how many held nodes each leaf still waits for.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, int> leaf_waits;
  for (Held& h : held_) {
    if (h.weight_node) buffers[h.node.get()] = std::move(h.grads);
    for (size_t i = 0; i < h.weight_edges.size(); ++i)
      if (h.weight_edges[i] && Split::is_leaf(h.node->next_edges[i].node.get()))
        ++leaf_waits[h.node->next_edges[i].node.get()];
  }
  auto take = [&](Node* n) {
    std::vector<Tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    complete(*n, in);
    return in;
  };
  for (Held& h : held_) {
    Node& node = *h.node;
    std::vector<Tensor> in = h.weight_node ? take(&node) : std::move(h.grads);
    const std::vector<Tensor> out = apply_node(node, in, h.weight_edges);
    in.clear();
    node.release();
    for (size_t i = 0; i < h.weight_edges.size(); ++i) {
      if (!h.weight_edges[i]) continue;
      const Edge& e = node.next_edges[i];
      std::vector<Tensor>& buffer = buffers[e.node.get()];
      if (out[i].defined()) add_gradient(buffer, e, out[i], node.name());
      if (Split::is_leaf(e.node.get()) && --leaf_waits[e.node.get()] == 0)
        apply_node(*e.node, take(e.node.get()), {});
    }
  }
  held_.clear();
}

}  // namespace titan::autograd
