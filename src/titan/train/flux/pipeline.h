#pragma once
// Text to images with FLUX, as diffusers' FluxPipeline does it: the prompts through T5 and CLIP
// (conditioning.h), noise sampled to latents by Euler steps (sampler.h, schedule.h) with the
// transformer, unpacked, unscaled (latents / scale + shift) and decoded by the autoencoder.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "titan/core/tensor.h"
#include "titan/data/image/image.h"
#include "titan/models/flux/model.h"
#include "titan/train/flux/conditioning.h"
#include "titan/train/flux/sampler.h"
#include "titan/train/flux/schedule.h"

namespace titan::train::flux {

struct SampleOptions {
  int64_t steps = 28;
  double cfg_scale = 1.0;  // two-pass guidance (diffusers' true_cfg_scale) when > 1
  double guidance = 3.5;   // the distilled guidance input; read only by a model with guidance_embed
  FlowSchedule schedule = {};  // the pipeline folder's scheduler/ (load_flow_schedule)
};

// `model`'s velocity at packed latents of latent_height x latent_width pixels: the position ids
// of those tokens and of the text, the timestep sigma, and the guidance input when the model has
// one.
VelocityFn flux_velocity(models::flux::FluxTransformer& model, int64_t latent_height, int64_t latent_width,
                         double guidance);

// Samples packed latents [B, L, in_channels] from packed `noise` of that shape, without
// gradients; `negative` is used when options.cfg_scale > 1.
Tensor sample(models::flux::FluxTransformer& model, const Tensor& noise, int64_t latent_height, int64_t latent_width,
              const TextConditioning& positive, const TextConditioning* negative, const SampleOptions& options);

struct ImageOptions {
  int64_t width = 256, height = 256;  // pixels; multiples of the autoencoder's downscale x the patch
  int64_t images_per_prompt = 1;
  uint64_t seed = 0;                  // of the initial noise (titan's Generator)
  std::string negative_prompt = "";   // read when sampling.cfg_scale > 1
  SampleOptions sampling;
};

class ImagePipeline {
 public:
  // The autoencoder's latent channels must be the transformer's latent_channels (T5's and CLIP's
  // widths, its context_in_dim and vec_in_dim, are checked on the first prompts).
  ImagePipeline(std::shared_ptr<ConditioningStack> conditioning,
                std::shared_ptr<models::flux::FluxTransformer> transformer);

  // The latent pixels (height, width) of an image of `height` x `width` pixels; throws naming
  // --height / --width when the size does not divide into the autoencoder's and the patches'
  // factors.
  std::pair<int64_t, int64_t> latent_size(int64_t height, int64_t width) const;

  // `count` images' packed noise [count, L, in_channels]: standard normal [count, C, h, w] from
  // Generator(seed), packed (as diffusers packs its unpacked noise).
  Tensor initial_noise(int64_t count, const ImageOptions& options) const;

  // Images [prompts x images_per_prompt, 3, H, W] in [0, 1] (diffusers' output_type "pt"): prompt
  // p's images at rows p * images_per_prompt onwards. `latents`, packed, replaces the seeded noise
  // (FluxPipeline's `latents` argument).
  Tensor generate(std::span<const std::string> prompts, const ImageOptions& options, const Tensor& latents = {});

  const models::flux::FluxTransformer& transformer() const { return *transformer_; }

 private:
  TextConditioning encode(std::span<const std::string> captions);

  std::shared_ptr<ConditioningStack> conditioning_;
  std::shared_ptr<models::flux::FluxTransformer> transformer_;
};

// Images [N, 3, H, W] in [0, 1] as one 8-bit picture, `columns` to a row (image i at row
// i / columns, column i % columns), each pixel round(255 x) as diffusers' numpy_to_pil.
data::Image image_grid(const Tensor& images, int64_t columns);

}  // namespace titan::train::flux
