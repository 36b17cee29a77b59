#include "titan/nn/conv2d.h"

#include <cmath>

#include "titan/nn/init.h"

namespace titan::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, bool with_bias, TensorOptions opts)
    : Conv2d(in_channels, out_channels, kernel_size,
             ops::Conv2dOptions{.stride = stride,
                                .pad_top = padding,
                                .pad_bottom = padding,
                                .pad_left = padding,
                                .pad_right = padding},
             with_bias, opts) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               const ops::Conv2dOptions& geometry, bool with_bias, TensorOptions opts)
    : geometry_(geometry) {
  TITAN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && geometry.stride > 0,
              "nn::Conv2d: channels, kernel size and stride must be positive, got in=", in_channels,
              " out=", out_channels, " kernel=", kernel_size, " stride=", geometry.stride);
  TITAN_CHECK(
      geometry.pad_top >= 0 && geometry.pad_bottom >= 0 && geometry.pad_left >= 0 && geometry.pad_right >= 0,
      "nn::Conv2d: padding must be >= 0, got top=", geometry.pad_top, " bottom=", geometry.pad_bottom,
      " left=", geometry.pad_left, " right=", geometry.pad_right);
  weight = register_parameter("weight",
                              Tensor::zeros({out_channels, in_channels, kernel_size, kernel_size}, opts));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out_channels}, opts));
}

Tensor Conv2d::forward(const Tensor& x) const {
  return ops::conv2d(x, weight, bias, geometry_);
}

void Conv2d::reset_parameters(Generator& gen) {
  const double fan_in = static_cast<double>(in_channels() * kernel_size() * kernel_size());
  const double bound = 1.0 / std::sqrt(fan_in);
  init::uniform_(weight, -bound, bound, gen);
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

}  // namespace titan::nn
