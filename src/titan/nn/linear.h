#pragma once
#include "titan/nn/module.h"

namespace titan::nn {

// y = x @ weight^T (+ bias), weight [out, in]: PyTorch's nn.Linear layout, so checkpoints map
// one to one. No bias by default, as in every Llama-family projection.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = false, TensorOptions opts = {});

  Tensor forward(const Tensor& x) const;
  // Wrappable: tensor parallelism's row-wise style adds the bias itself, after its reduction.
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  // PyTorch's default: weight and bias uniform in +-1/sqrt(in_features) (kaiming_uniform_ with
  // a = sqrt(5)). Models that want TorchTitan's truncated normal override it from their own
  // reset_parameters.
  void reset_parameters(Generator& gen) override;

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], or undefined
};

}  // namespace titan::nn
