#include "titan/train/flux/rectified_flow.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"

namespace titan::train::flux {

namespace {

// t [B] as [B, 1, ..., 1] against x's dims.
Tensor per_sample(const Tensor& t, const Tensor& x) {
  TITAN_CHECK(t.dim() == 1 && x.dim() >= 1 && t.size(0) == x.size(0),
              "rectified flow: t must be [B] with B = ", x.dim() >= 1 ? x.size(0) : 0,
              " (one time per sample of ", x.desc(), "), got ", t.desc());
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[0] = t.size(0);
  return t.to(x.dtype()).reshape(s);
}

}  // namespace

Tensor noisy_latents(const Tensor& x0, const Tensor& noise, const Tensor& t) {
  TITAN_CHECK(x0.sizes() == noise.sizes(), "rectified flow: x0 ", x0.desc(), " and noise ", noise.desc(),
              " must have one shape");
  const Tensor tt = per_sample(t, x0);
  return x0 + tt * (noise - x0);
}

Tensor flow_matching_loss(const Tensor& predicted, const Tensor& x0, const Tensor& noise) {
  TITAN_CHECK(predicted.sizes() == x0.sizes() && x0.sizes() == noise.sizes(),
              "flow matching loss: predicted ", predicted.desc(), ", x0 ", x0.desc(), " and noise ",
              noise.desc(), " must have one shape");
  return ops::mean(ops::square(predicted - (noise - x0)));
}

Tensor sample_timesteps_uniform(int64_t batch, Generator& gen) {
  TITAN_CHECK(batch > 0, "rectified flow: batch must be positive, got ", batch);
  return Tensor::rand({batch}, gen);
}

double time_shift(double t, double shift) {
  return shift * t / (1.0 + (shift - 1.0) * t);
}

Tensor sample_timesteps_logit_normal(int64_t batch, Generator& gen, double mean, double std, double shift) {
  TITAN_CHECK(batch > 0, "rectified flow: batch must be positive, got ", batch);
  TITAN_CHECK(std > 0 && shift > 0,
              "rectified flow: the logit-normal's std and the shift must be positive, got std ", std,
              " and shift ", shift);
  const std::vector<double> z = Tensor::randn({batch}, gen, {.dtype = kF64}, mean, std).to_vector<double>();
  std::vector<float> t(z.size());
  for (size_t i = 0; i < z.size(); ++i)
    t[i] = static_cast<float>(time_shift(1.0 / (1.0 + std::exp(-z[i])), shift));
  return Tensor::from_vector<float>(t, {batch});
}

}  // namespace titan::train::flux
