#include "titan/nn/auxiliary_loss.h"

#include <map>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"

namespace titan::nn {

struct AuxiliaryLosses::State {
  struct Term {
    Tensor value;  // detached
    std::function<Tensor(const Tensor& x)> weigh;
  };
  std::map<int64_t, Term> terms;  // by key
  DType dtype = kF32;
  Tensor grad;  // dL/d(total), 0-d, set by total()'s node in backward
};

AuxiliaryLosses::AuxiliaryLosses() : state_(std::make_shared<State>()) {}

Tensor AuxiliaryLosses::attach(const Tensor& out, const Tensor& term, double weight, int64_t key) {
  TITAN_CHECK(term.defined() && term.numel() == 1,
              "AuxiliaryLosses::attach: the term must be a one-element tensor, got ",
              term.defined() ? term.desc() : std::string("an undefined tensor"));
  return attach(
      out, term, [weight](const Tensor& x) { return ops::scale(x, weight); }, key);
}

Tensor AuxiliaryLosses::attach(const Tensor& out, const Tensor& term, std::function<Tensor(const Tensor& x)> weigh,
                               int64_t key) {
  TITAN_CHECK(term.defined() && is_floating(term.dtype()),
              "AuxiliaryLosses::attach: the term must be a floating tensor, got ",
              term.defined() ? term.desc() : std::string("an undefined tensor"));
  TITAN_CHECK(out.defined(), "AuxiliaryLosses::attach: `out` is undefined; attach to the module's output");
  if (!state_->terms.contains(key)) count(term, weigh, key);
  Tensor result = out.detach();
  autograd::record("attach_auxiliary_loss", {out, term}, {result},
         [state = state_, weigh = std::move(weigh), shape = term.sizes()](const autograd::GradContext& g) {
           // No total() in the objective: the terms get no gradient.
           if (!state->grad.defined()) return std::vector<Tensor>{g[0], Tensor()};
           Tensor d = weigh(state->grad);
           if (d.sizes() != shape) d = d.reshape(shape);
           return std::vector<Tensor>{g[0], d};
         });
  return result;
}

Tensor AuxiliaryLosses::take(int64_t key) {
  const auto it = state_->terms.find(key);
  TITAN_CHECK(it != state_->terms.end(), "AuxiliaryLosses::take: no term under key ", key);
  Tensor value = it->second.value;
  state_->terms.erase(it);
  return value;
}

void AuxiliaryLosses::count(const Tensor& term, std::function<Tensor(const Tensor& x)> weigh, int64_t key) {
  state_->terms[key] = {term.detach(), std::move(weigh)};
  state_->dtype = term.dtype();
}

Tensor AuxiliaryLosses::total() const {
  Tensor sum;
  for (const auto& [key, term] : state_->terms) {
    const Tensor weighed = term.weigh(term.value);
    TITAN_CHECK(weighed.numel() == term.value.numel(), "AuxiliaryLosses::total: term ", key, " is ",
                term.value.desc(), " and weighs to ", weighed.desc(), "; weigh must keep its shape");
    const Tensor part = ops::sum(weighed);
    sum = sum.defined() ? ops::add(sum, part) : part;
  }
  Tensor out = sum.defined() ? sum.detach() : Tensor::full({}, 0.0, {.dtype = state_->dtype});
  if (!autograd::grad_enabled()) return out;
  // The node has no real input: the terms are reached through attach's nodes, not from here. A
  // zero-element leaf stands in so that record() makes the node, and its edge is dropped at once,
  // as autograd::checkpoint does.
  Tensor stand_in = Tensor::empty({0}).requires_grad_();
  autograd::record("auxiliary_loss_total", {stand_in}, {out}, [state = state_](const autograd::GradContext& g) {
    state->grad = g[0];
    return std::vector<Tensor>{Tensor()};
  });
  out.grad_fn()->next_edges.pop_back();
  return out;
}

}  // namespace titan::nn
