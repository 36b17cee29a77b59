#pragma once
// Rectified flow as FLUX trains it: x_t = (1 - t) x0 + t noise, the model predicts the velocity
// noise - x0, and the loss is their mean squared error; t from U(0, 1) (TorchTitan's) or from
// SD3's logit-normal with a resolution shift.
#include <cstdint>

#include "titan/core/rng.h"
#include "titan/core/tensor.h"

namespace titan::train::flux {

// (1 - t) x0 + t noise; x0 and noise [B, ...] of one shape, t [B] broadcast over the rest.
Tensor noisy_latents(const Tensor& x0, const Tensor& noise, const Tensor& t);
// mean((predicted - (noise - x0))^2) over every element.
Tensor flow_matching_loss(const Tensor& predicted, const Tensor& x0, const Tensor& noise);

// t [batch] f32 ~ U(0, 1) from `gen`'s stream.
Tensor sample_timesteps_uniform(int64_t batch, Generator& gen);
// SD3's logit-normal: u = sigmoid(N(mean, std)) from `gen`'s stream, then the time shift
// t = s u / (1 + (s - 1) u) (s = 1: none; s > 1 moves t towards noise). f32 [batch].
Tensor sample_timesteps_logit_normal(int64_t batch, Generator& gen, double mean = 0.0, double std = 1.0,
                                     double shift = 1.0);
// The time shift on its own (also what samplers apply to their schedule).
double time_shift(double t, double shift);

}  // namespace titan::train::flux
