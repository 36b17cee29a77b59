#pragma once
#include "titan/nn/module.h"

namespace titan::nn {

// A normalisation over the last dim, whichever kind: what a model that picks its norm from data
// (models/hf) holds.
class Norm : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) {
    return run_forward([&] { return forward(x); });
  }
};

// x / sqrt(mean(x^2) + eps) * weight over the last dim. eps defaults to 1e-5, the norm_eps of
// Llama 3 and of TorchTitan's model args (PyTorch's nn.RMSNorm would take the dtype's epsilon).
// With unit_offset the scale is (1 + weight), as Gemma stores it: its weights start at 0, and
// keeping them as stored makes import and export exact.
class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5, TensorOptions opts = {}, bool unit_offset = false);

  Tensor forward(const Tensor& x) const override;
  void reset_parameters(Generator& gen) override;  // the scale = 1

  double eps() const { return eps_; }
  bool unit_offset() const { return unit_offset_; }

  Tensor weight;  // [dim]

 private:
  double eps_;
  bool unit_offset_;
};

// (x - mean) / sqrt(var + eps) * weight + bias over the last dim; PyTorch's nn.LayerNorm defaults
// (eps 1e-5, affine weight and bias). Either affine tensor can be switched off.
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true,
                     TensorOptions opts = {});

  Tensor forward(const Tensor& x) const override;
  void reset_parameters(Generator& gen) override;  // weight = 1, bias = 0

  double eps() const { return eps_; }

  Tensor weight;  // [dim], or undefined without elementwise_affine
  Tensor bias;    // [dim], or undefined without elementwise_affine or bias

 private:
  double eps_;
};

}  // namespace titan::nn
