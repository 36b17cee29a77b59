#include "titan/nn/moe/router.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/nn/init.h"
#include "titan/ops/arith.h"
#include "titan/ops/moe.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan::nn::moe {

TopKRouter::TopKRouter(int64_t dim, int64_t num_experts, int64_t top_k, bool norm_topk_prob, bool with_bias,
                       double init_std, TensorOptions opts)
    : top_k_(top_k), norm_topk_prob_(norm_topk_prob), init_std_(init_std) {
  TITAN_CHECK(num_experts >= 1 && top_k >= 1 && top_k <= num_experts, "moe::TopKRouter: top_k (", top_k,
              ") must be in [1, num_experts = ", num_experts, "]");
  gate = register_module("gate", std::make_shared<Linear>(dim, num_experts, false, opts));
  if (with_bias) expert_bias = register_buffer("expert_bias", Tensor::zeros({num_experts}, opts));
}

Routing TopKRouter::route(const Tensor& x) {
  Routing r;
  {
    // The router's scores in float32 whatever the run's precision, as mixed-precision MoE training
    // keeps routing: a product of dim x experts costs nothing next to the experts', and scores
    // rounded to bf16 (2^-9 relative) tie or swap experts whose scores are close, which float32's
    // do not.
    const AutocastGuard float32(kF32);
    r.scores = ops::softmax((*gate)(x), -1);
  }
  ops::TopKExperts top = ops::topk_experts(r.scores, top_k_, expert_bias);
  r.weights = norm_topk_prob_ ? top.weights / ops::sum(top.weights, -1, true) : top.weights;
  r.ids = top.ids;
  r.tokens_per_expert = ops::expert_counts(r.ids, num_experts());
  return r;
}

void TopKRouter::update_expert_bias(const std::vector<int64_t>& tokens_per_expert, double rate) {
  TITAN_CHECK(expert_bias.defined(),
              "moe::TopKRouter: update_expert_bias on a router built without the bias; "
              "build it with expert_bias = true (moe.load_balance_bias)");
  const int64_t n = num_experts();
  TITAN_CHECK(static_cast<int64_t>(tokens_per_expert.size()) == n,
              "moe::TopKRouter: ", tokens_per_expert.size(), " token counts for ", n, " experts");
  double mean = 0;
  for (int64_t c : tokens_per_expert) mean += static_cast<double>(c) / static_cast<double>(n);
  std::vector<double> delta(static_cast<size_t>(n));
  double delta_mean = 0;
  for (int64_t e = 0; e < n; ++e) {
    const double gap = mean - static_cast<double>(tokens_per_expert[e]);
    delta[e] = rate * static_cast<double>((gap > 0) - (gap < 0));
    delta_mean += delta[e] / static_cast<double>(n);
  }
  autograd::NoGradGuard no_grad;
  Tensor step = Tensor::from_vector(delta, {n}).to(expert_bias.dtype());
  expert_bias.copy_(expert_bias + (step - delta_mean));
}

void TopKRouter::reset_parameters(Generator& gen) {
  init::trunc_normal_(gate->weight, 0.0, init_std_, -2.0, 2.0, gen);
  if (expert_bias.defined()) init::zeros_(expert_bias);
}

}  // namespace titan::nn::moe
