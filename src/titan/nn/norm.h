#pragma once
#include "titan/nn/module.h"

namespace titan::nn {

// x / sqrt(mean(x^2) + eps) * weight over the last dim. eps defaults to 1e-5, the norm_eps of
// Llama 3 and of TorchTitan's model args (PyTorch's nn.RMSNorm would take the dtype's epsilon).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5, TensorOptions opts = {});

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward([&] { return forward(x); });
  }
  void reset_parameters(Generator& gen) override;  // weight = 1

  double eps() const { return eps_; }

  Tensor weight;  // [dim]

 private:
  double eps_;
};

// (x - mean) / sqrt(var + eps) * weight + bias over the last dim; PyTorch's nn.LayerNorm defaults
// (eps 1e-5, affine weight and bias). Either affine tensor can be switched off.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true,
                     TensorOptions opts = {});

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward([&] { return forward(x); });
  }
  void reset_parameters(Generator& gen) override;  // weight = 1, bias = 0

  double eps() const { return eps_; }

  Tensor weight;  // [dim], or undefined without elementwise_affine
  Tensor bias;    // [dim], or undefined without elementwise_affine or bias

 private:
  double eps_;
};

}  // namespace titan::nn
