#pragma once
// The feed-forward of the decoders and text encoders: gated, w2(act(w1 x) * w3 x) (Llama's SwiGLU,
// Gemma's GeGLU, T5 v1.1's gated-gelu), or plain, w2(act(w1 x)) (GPT-NeoX's, CLIP's), with or
// without biases.
#include <cstdint>
#include <memory>

#include "titan/nn/linear.h"

namespace titan::models::common {

enum class Activation { silu, gelu, gelu_tanh, quick_gelu };

struct FeedForwardArgs {
  Activation activation = Activation::silu;
  bool gated = true;  // w3 and the product; false: no w3
  bool bias = false;  // every projection with a bias
};

class FeedForward : public nn::Module {
 public:
  // `init_std`: the std of w2 and w3 at initialisation (depth-scaled per block).
  FeedForward(int64_t dim, int64_t hidden_dim, double init_std, TensorOptions opts = {},
              FeedForwardArgs args = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  // TorchTitan's: w1 truncated normal with std 0.02; w2 and w3 with init_std; biases at 0.
  void reset_parameters(Generator& gen) override;

  std::shared_ptr<nn::Linear> w1, w2, w3;  // w3 null when not gated

 private:
  Tensor activate(const Tensor& h) const;

  double init_std_;
  Activation activation_;
};

}  // namespace titan::models::common
