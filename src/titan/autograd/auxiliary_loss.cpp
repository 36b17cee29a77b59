#include "titan/autograd/auxiliary_loss.h"

#include <map>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"

namespace titan::autograd {

struct AuxiliaryLosses::State {
  struct Term {
    Tensor value;  // detached
    std::function<Tensor(double scale)> weights;
  };
  std::map<int64_t, Term> terms;  // by key
  DType dtype = kF32;
  double grad = 0;  // dL/d(total), set by total()'s node in backward
};

AuxiliaryLosses::AuxiliaryLosses() : state_(std::make_shared<State>()) {}

Tensor AuxiliaryLosses::attach(const Tensor& out, const Tensor& term, double weight, int64_t key) {
  TITAN_CHECK(term.defined() && term.numel() == 1,
              "AuxiliaryLosses::attach: the term must be a one-element tensor, got ",
              term.defined() ? term.desc() : std::string("an undefined tensor"));
  return attach(
      out, term,
      [weight, shape = term.sizes(), dtype = term.dtype()](double scale) {
        return Tensor::full(shape, scale * weight, {.dtype = dtype});
      },
      key);
}

Tensor AuxiliaryLosses::attach(const Tensor& out, const Tensor& term,
                               std::function<Tensor(double scale)> weights, int64_t key) {
  TITAN_CHECK(term.defined() && is_floating(term.dtype()),
              "AuxiliaryLosses::attach: the term must be a floating tensor, got ",
              term.defined() ? term.desc() : std::string("an undefined tensor"));
  TITAN_CHECK(out.defined(), "AuxiliaryLosses::attach: `out` is undefined; attach to the module's output");
  state_->terms[key] = {term.detach(), weights};
  state_->dtype = term.dtype();
  Tensor result = out.detach();
  record("attach_auxiliary_loss", {out, term}, {result},
         [state = state_, weights = std::move(weights)](const GradContext& g) {
           return std::vector<Tensor>{g[0], weights(state->grad)};
         });
  return result;
}

Tensor AuxiliaryLosses::total() const {
  double sum = 0;
  for (const auto& [key, term] : state_->terms) {
    const Tensor weights = term.weights(1.0);
    TITAN_CHECK(weights.sizes() == term.value.sizes(), "AuxiliaryLosses::total: the weights of term ", key,
                " are ", weights.desc(), ", its value ", term.value.desc(), "; make them one shape");
    const std::vector<double> w = weights.to(kF64).to_vector<double>();
    const std::vector<double> v = term.value.to(kF64).to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i) sum += w[i] * v[i];
  }
  Tensor out = Tensor::full({}, sum, {.dtype = state_->dtype});
  if (!grad_enabled()) return out;
  // The node has no real input: the terms are reached through attach's nodes, not from here. A
  // zero-element leaf stands in so that record() makes the node, and its edge is dropped at once,
  // as autograd::checkpoint does.
  Tensor stand_in = Tensor::empty({0}).requires_grad_();
  record("auxiliary_loss_total", {stand_in}, {out}, [state = state_](const GradContext& g) {
    state->grad = g[0].item();
    return std::vector<Tensor>{Tensor()};
  });
  out.grad_fn()->next_edges.pop_back();
  return out;
}

}  // namespace titan::autograd
