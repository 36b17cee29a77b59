#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"

#include <atomic>

#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"
#include "titan/kernels/cpu/elementwise.h"

namespace titan::autograd {

namespace {
std::atomic<uint64_t> g_sequence{0};
}

std::vector<Tensor> FunctionNode::apply(const GradContext& ctx) {
  TITAN_CHECK(fn_ != nullptr, "autograd: backward through ", name_,
              " a second time; its saved tensors were freed after the first backward "
              "(pass retain_graph=true to the first call to keep them)");
  return fn_(ctx);
}

std::vector<Tensor> AccumulateGrad::apply(const GradContext& ctx) {
  MemoryOwnerScope owner(MemoryCategory::gradients);
  Tensor g = ctx[0];
  AutogradMeta& meta = leaf_.autograd_meta();
  for (auto& hook : meta.grad_hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  if (g.is_lazy() || (meta.grad.defined() && meta.grad.is_lazy())) {
    // A value of the captured step: a new value, not a buffer to own or add into.
    meta.grad = meta.grad.defined() ? graph::add(meta.grad, g) : g.detach();
  } else if (!meta.grad.defined()) {
    // Steal the incoming buffer when nothing else references it; otherwise copy so that two
    // leaves never share one .grad.
    bool sole_owner = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 &&
                      g.is_contiguous() && g.storage_offset() == 0 && g.dtype() == leaf_.dtype();
    if (sole_owner) {
      meta.grad = g.detach();
      // Made by another node's backward, as workspace; from now on it is the gradient.
      CpuAllocator::instance().set_owner(g.storage()->data(), {MemoryCategory::gradients, 0});
    } else {
      meta.grad = Tensor::empty(leaf_.sizes(), leaf_.options());
      kernels::cpu::copy(g, meta.grad);
    }
  } else {
    kernels::cpu::accumulate(meta.grad, g);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (!meta.requires_grad) return {};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    acc->output_shapes = {t.sizes()};
    acc->output_dtypes = {t.dtype()};
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  if (!needs_grad(inputs)) return;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->sequence_nr = g_sequence.fetch_add(1);
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& meta = outputs[i].autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    node->output_shapes.push_back(outputs[i].sizes());
    node->output_dtypes.push_back(outputs[i].dtype());
  }
}

}  // namespace titan::autograd
