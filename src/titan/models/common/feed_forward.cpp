#include "titan/models/common/feed_forward.h"

#include "titan/models/common/init.h"
#include "titan/ops/activation.h"

namespace titan::models::common {

FeedForward::FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts)
    : init_std_(init_std) {
  w1 = register_module("w1", std::make_shared<nn::Linear>(dim, hidden_dim, false, opts));
  w2 = register_module("w2", std::make_shared<nn::Linear>(hidden_dim, dim, false, opts));
  w3 = register_module("w3", std::make_shared<nn::Linear>(dim, hidden_dim, false, opts));
}

Tensor FeedForward::forward(const Tensor& x) {
  return (*w2)(ops::swiglu((*w1)(x), (*w3)(x)));
}

void FeedForward::reset_parameters(Generator& gen) {
  trunc_normal(w1->weight, kInitStd, gen);
  trunc_normal(w2->weight, init_std_, gen);
  trunc_normal(w3->weight, init_std_, gen);
}

}  // namespace titan::models::common
