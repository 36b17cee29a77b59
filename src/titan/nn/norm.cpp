#include "titan/nn/norm.h"

#include "titan/nn/init.h"
#include "titan/ops/arith.h"
#include "titan/ops/norm.h"

namespace titan::nn {

namespace {
void check_norm_args(const char* module, int64_t dim, double eps) {
  TITAN_CHECK(dim > 0 && eps >= 0, module, ": expected dim > 0 and eps >= 0, got dim=", dim, " eps=", eps);
}
}  // namespace

RMSNorm::RMSNorm(int64_t dim, double eps, TensorOptions opts, bool unit_offset)
    : eps_(eps), unit_offset_(unit_offset) {
  check_norm_args("nn::RMSNorm", dim, eps);
  weight = register_parameter("weight", unit_offset ? Tensor::zeros({dim}, opts) : Tensor::ones({dim}, opts));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return ops::rms_norm(x, unit_offset_ ? weight + 1.0 : weight, eps_);
}

void RMSNorm::reset_parameters(Generator&) {
  if (unit_offset_)
    init::zeros_(weight);
  else
    init::ones_(weight);
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool elementwise_affine, bool with_bias, TensorOptions opts)
    : eps_(eps) {
  check_norm_args("nn::LayerNorm", dim, eps);
  if (!elementwise_affine) return;
  weight = register_parameter("weight", Tensor::ones({dim}, opts));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({dim}, opts));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return ops::layer_norm(x, weight, bias, eps_);
}

void LayerNorm::reset_parameters(Generator&) {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

}  // namespace titan::nn
