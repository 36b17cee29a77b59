#pragma once
// The SwiGLU feed-forward of the Llama-family decoders: w2(silu(w1 x) * w3 x).
#include <cstdint>
#include <memory>

#include "titan/nn/linear.h"

namespace titan::models::common {

class FeedForward : public nn::Module {
 public:
  // `init_std`: the std of w2 and w3 at initialisation (depth-scaled per block).
  FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  // TorchTitan's: w1 truncated normal with std 0.02; w2 and w3 with init_std.
  void reset_parameters(Generator& gen) override;

  std::shared_ptr<nn::Linear> w1, w2, w3;

 private:
  double init_std_;
};

}  // namespace titan::models::common
