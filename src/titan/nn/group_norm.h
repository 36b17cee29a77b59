#pragma once
#include "titan/nn/module.h"

namespace titan::nn {

// PyTorch's nn.GroupNorm: x [N, C, *] normalised per image over each group of C / groups
// consecutive channels and all positions, then scaled and shifted per channel. eps defaults to
// PyTorch's 1e-5 (diffusers' autoencoders pass 1e-6).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps = 1e-5, bool affine = true, TensorOptions opts = {});

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  void reset_parameters(Generator& gen) override;  // weight = 1, bias = 0

  int64_t groups() const { return groups_; }
  double eps() const { return eps_; }

  Tensor weight;  // [channels], or undefined without affine
  Tensor bias;    // [channels], or undefined without affine

 private:
  int64_t groups_;
  double eps_;
};

}  // namespace titan::nn
