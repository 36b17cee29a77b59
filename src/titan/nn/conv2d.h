#pragma once
#include "titan/nn/module.h"
#include "titan/ops/conv2d.h"

namespace titan::nn {

// PyTorch's nn.Conv2d (groups 1, dilation 1): weight [out, in, k, k], bias [out], so checkpoints
// map one to one. The geometry form takes uneven padding (diffusers' Downsample2D pads only the
// bottom and right, which torch does with F.pad before a padding-0 convolution).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, TensorOptions opts = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const ops::Conv2dOptions& geometry,
         bool bias = true, TensorOptions opts = {});

  Tensor forward(const Tensor& x) const;  // x [N, in, H, W]
  Tensor operator()(const Tensor& x) {
    return run_forward(x, [this](const Tensor& in) { return forward(in); });
  }

  // PyTorch's default: weight and bias uniform in +-1/sqrt(in * k * k) (kaiming_uniform_ with
  // a = sqrt(5)).
  void reset_parameters(Generator& gen) override;

  int64_t in_channels() const { return weight.size(1); }
  int64_t out_channels() const { return weight.size(0); }
  int64_t kernel_size() const { return weight.size(2); }
  const ops::Conv2dOptions& geometry() const { return geometry_; }

  Tensor weight;  // [out, in, k, k]
  Tensor bias;    // [out], or undefined

 private:
  ops::Conv2dOptions geometry_;
};

}  // namespace titan::nn
