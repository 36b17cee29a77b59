#pragma once
// The noise levels FLUX samples over: diffusers' FluxPipeline with its
// FlowMatchEulerDiscreteScheduler. With FLUX.1-dev's scheduler config (use_dynamic_shifting,
// base_shift 0.5, max_shift 1.15, base_image_seq_len 256, max_image_seq_len 4096) this is BFL's
// get_schedule (black-forest-labs/flux sampling.py: linspace(1, 0, n + 1), exponential shift by mu
// from the packed token count); FLUX.1-schnell's config (no dynamic shifting, shift 1) leaves the
// line unshifted, as BFL's get_schedule(..., shift=False) for schnell. TorchTitan's sampler passes
// latent_h * latent_w instead of the packed count (4x as many tokens with 2x2 patches), so its mu,
// and its images, differ from both.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace titan::train::flux {

// What of a scheduler_config.json the schedule depends on; the defaults are FLUX.1-dev's.
struct FlowSchedule {
  bool dynamic_shifting = true;  // use_dynamic_shifting: shift by mu from the image's length
  bool exponential = true;       // time_shift_type "exponential" (else "linear"), for the dynamic shift
  double shift = 1.0;            // the fixed shift without dynamic shifting (1: none)
  int64_t base_seq_len = 256;
  int64_t max_seq_len = 4096;
  double base_shift = 0.5;
  double max_shift = 1.15;
};

// diffusers' calculate_shift: the line through (base_seq_len, base_shift) and (max_seq_len,
// max_shift) at `image_seq_len`, the packed image tokens (latent_h / 2 * latent_w / 2).
double schedule_mu(int64_t image_seq_len, const FlowSchedule& schedule = {});

// `steps` + 1 sigmas from 1 down to 0: linspace(1, 1 / steps, steps) shifted, then 0. The dynamic
// shift is exp(mu) / (exp(mu) + (1 / t - 1)) (linear: mu / (mu + (1 / t - 1))), which is
// rectified_flow.h's time_shift(t, exp(mu)): more of the steps at high noise for larger images;
// without it, time_shift(t, shift). Step i runs the model at timestep sigmas[i] (in [0, 1]: the
// model multiplies by 1000) and moves x by (sigmas[i + 1] - sigmas[i]) * v.
std::vector<double> flux_sigmas(int64_t steps, int64_t image_seq_len, const FlowSchedule& schedule = {});

// The settings of a diffusers scheduler_config.json (`where` names it in errors). What titan's
// sampler does not do is refused naming the key: another scheduler class, num_train_timesteps
// other than 1000 (FluxPipeline divides by 1000), shift_terminal, Karras / exponential / beta
// sigmas, invert_sigmas, stochastic_sampling. Keys that do not change the schedule are ignored.
FlowSchedule flow_schedule_from_config(const nlohmann::json& config, const std::string& where);
// `dir`/scheduler_config.json (a diffusers FLUX folder's scheduler/).
FlowSchedule load_flow_schedule(const std::filesystem::path& dir);

}  // namespace titan::train::flux
