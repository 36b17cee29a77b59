#pragma once
// The noise levels FLUX samples over: diffusers' FluxPipeline with its
// FlowMatchEulerDiscreteScheduler (use_dynamic_shifting, base_shift 0.5, max_shift 1.15,
// base_image_seq_len 256, max_image_seq_len 4096), which is also BFL's get_schedule
// (black-forest-labs/flux sampling.py: linspace(1, 0, n + 1), exponential shift by mu from the
// packed token count). TorchTitan's sampler passes latent_h * latent_w instead of the packed
// count (4x as many tokens with 2x2 patches), so its mu, and its images, differ from both.
#include <cstdint>
#include <vector>

namespace titan::train::flux {

struct ScheduleShift {
  int64_t base_seq_len = 256;
  int64_t max_seq_len = 4096;
  double base_shift = 0.5;
  double max_shift = 1.15;
};

// diffusers' calculate_shift: the line through (base_seq_len, base_shift) and (max_seq_len,
// max_shift) at `image_seq_len`, the packed image tokens (latent_h / 2 * latent_w / 2).
double schedule_mu(int64_t image_seq_len, const ScheduleShift& shift = {});

// `steps` + 1 sigmas from 1 down to 0: linspace(1, 1 / steps, steps) shifted, then 0. The shift is
// diffusers' exponential one, exp(mu) / (exp(mu) + (1 / t - 1)), which is rectified_flow.h's
// time_shift(t, exp(mu)): more of the steps at high noise for larger images. Step i
// runs the model at timestep sigmas[i] (in [0, 1]: the model multiplies by 1000) and moves
// x by (sigmas[i + 1] - sigmas[i]) * v.
std::vector<double> flux_sigmas(int64_t steps, int64_t image_seq_len, const ScheduleShift& shift = {});

}  // namespace titan::train::flux
