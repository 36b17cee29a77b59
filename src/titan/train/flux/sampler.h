#pragma once
// Euler sampling of FLUX's rectified flow: from noise at sigma 1 to an image's latents at 0 over
// schedule.h's sigmas, x += (sigma_next - sigma) * v, as diffusers' FluxPipeline with
// FlowMatchEulerDiscreteScheduler steps (and BFL's denoise). The guidance is either
//   - two-pass classifier-free guidance (diffusers' true_cfg_scale): v = neg + scale * (pos - neg),
//     the model run once on the prompt and once on the negative prompt, or
//   - flux-dev's distilled guidance: one pass with the guidance scale as the model's input
//     (only a model with guidance_embed has that input).
// Both may be combined, as diffusers allows. pipeline.h runs this with the FLUX transformer.
#include <cstdint>
#include <functional>
#include <span>

#include "titan/core/tensor.h"

namespace titan::train::flux {

// What the transformer is conditioned on, per sample: T5's last hidden state [B, L, d] and
// CLIP's pooled vector [B, d'] (ConditioningStack::encode_text's "t5" and "clip_pooled").
struct TextConditioning {
  Tensor t5;
  Tensor clip_pooled;
};

// The predicted velocity (noise - x0) at packed latents `x` [B, L, C] and noise level `sigma`.
using VelocityFn = std::function<Tensor(const Tensor& x, double sigma, const TextConditioning& text)>;

// Euler steps over `sigmas` (flux_sigmas: decreasing, ending at 0) from `noise`. With `negative`
// each step runs `velocity` twice and mixes the two predictions by `cfg_scale`; otherwise once.
Tensor euler_sample(const Tensor& noise, std::span<const double> sigmas, const VelocityFn& velocity,
                    const TextConditioning& positive, const TextConditioning* negative = nullptr,
                    double cfg_scale = 1.0);

}  // namespace titan::train::flux
