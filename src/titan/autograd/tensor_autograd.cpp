// Tensor's autograd methods (declared in core/tensor.h).
#include "titan/autograd/engine.h"
#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"

namespace titan {

bool Tensor::requires_grad() const {
  return impl_ && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  TITAN_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ",
              desc());
  TITAN_CHECK(is_leaf(), "requires_grad_: ", desc(),
              " is the result of an op; only leaves can be marked (use detach() first)");
  autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const {
  return impl_ && impl_->autograd ? impl_->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  TITAN_CHECK(!g.defined() || (g.sizes() == sizes() && g.dtype() == dtype()),
              "set_grad: gradient ", g.desc(), " does not match tensor ", desc());
  autograd_meta().grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_ && impl_->autograd ? impl_->autograd->grad_fn : none;
}

uint32_t Tensor::output_nr() const { return impl_ && impl_->autograd ? impl_->autograd->output_nr : 0; }

void Tensor::backward(const Tensor& grad) const {
  Tensor g = grad;
  if (!g.defined()) {
    TITAN_CHECK(numel() == 1, "backward: gradient can be implied only for a one-element tensor, got ",
                desc(), "; pass the gradient explicitly");
    g = is_lazy() ? graph::full(sizes(), 1.0, dtype()) : Tensor::ones(sizes(), options());
  }
  autograd::backward({*this}, {g});
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  TITAN_CHECK(requires_grad(), "register_hook: tensor ", desc(), " does not require grad");
  AutogradMeta& meta = autograd_meta();
  if (meta.grad_fn) meta.grad_fn->output_hooks.emplace_back(meta.output_nr, std::move(hook));
  else meta.grad_hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const {
  TITAN_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: tensor ", desc(),
              " must be a leaf that requires grad");
  autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace titan
