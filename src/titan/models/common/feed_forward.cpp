#include "titan/models/common/feed_forward.h"

#include "titan/core/error.h"
#include "titan/models/common/init.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"

namespace titan::models::common {

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts,
                         FeedForwardArgs args)
    : init_std_(init_std), activation_(args.activation) {
  w1 = register_module("w1", std::make_shared<nn::Linear>(dim, hidden_dim, args.bias, opts));
  w2 = register_module("w2", std::make_shared<nn::Linear>(hidden_dim, dim, args.bias, opts));
  if (args.gated) w3 = register_module("w3", std::make_shared<nn::Linear>(dim, hidden_dim, args.bias, opts));
}

Tensor FeedForward::forward(const Tensor& x) {
  // SwiGLU has a fused kernel; the others are two ops.
  if (w3 && activation_ == Activation::silu) return (*w2)(ops::swiglu((*w1)(x), (*w3)(x)));
  const Tensor a = activate((*w1)(x));
  return (*w2)(w3 ? a * (*w3)(x) : a);
}

Tensor FeedForward::activate(const Tensor& h) const {
  switch (activation_) {
    case Activation::silu: return ops::silu(h);
    case Activation::gelu: return ops::gelu(h);
    case Activation::gelu_tanh: return ops::gelu(h, ops::GeluApproximation::tanh);
    case Activation::quick_gelu: return ops::quick_gelu(h);
  }
  throw Error("FeedForward: unknown activation");
}

void FeedForward::reset_parameters(Generator& gen) {
  trunc_normal(w1->weight, kInitStd, gen);
  trunc_normal(w2->weight, init_std_, gen);
  if (w3) trunc_normal(w3->weight, init_std_, gen);
  for (const auto& w : {w1, w2, w3})
    if (w && w->bias.defined()) nn::init::zeros_(w->bias);
}

}  // namespace titan::models::common
