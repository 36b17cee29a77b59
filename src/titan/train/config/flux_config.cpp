#include "titan/train/config/flux_config.h"

namespace titan::train {

void declare_keys(config::Keys<FluxConfig>& keys) {
  using C = FluxConfig;
  keys.add("cache_path", &C::cache_path, {},
           "the encoding cache of `titan flux encode` that training reads (this or data_path)")
      .add("data_path", &C::data_path, {},
           "an image-caption folder or webdataset .tar shards that pipeline_path's frozen encoders encode every "
           "step, instead of a cache (this or cache_path)")
      .add("pipeline_path", &C::pipeline_path, {},
           "with data_path: a diffusers FLUX folder (text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, "
           "vae/) whose encoders run every step")
      .add("validation_cache_path", &C::validation_cache_path, {},
           "a held-out encoding cache for validation (with cache_path); empty: the last validation_samples of "
           "cache_path or data_path, which training leaves out")
      .add("validation_samples", &C::validation_samples, config::positive(),
           "samples a validation pass reads (from validation_cache_path, or held out of cache_path)")
      .add("image_size", &C::image_size, config::positive(),
           "pixels per image side: the cache's (checked against it), or data_path's images resized and "
           "cropped to it (crop)")
      .add("crop", &C::crop, config::one_of({"random", "center"}),
           "with data_path: a training image's image_size square cut at random, afresh each time the sample is "
           "drawn (TorchTitan's), or from the center; validation images are center-cropped")
      .add("latent_downscale", &C::latent_downscale, config::positive(),
           "image pixels per latent pixel of the cache's autoencoder (FLUX.1's: 8; checked against the cache)")
      .add("t5_length", &C::t5_length, config::positive(),
           "T5 tokens per caption: the cache's (checked against it), or what the encoders see of data_path's")
      .add("timestep_sampling", &C::timestep_sampling, config::one_of({"uniform", "logit_normal"}),
           "how t is drawn: U(0, 1) (TorchTitan) or SD3's sigmoid(N(logit_mean, logit_std)), then time_shift")
      .add("logit_mean", &C::logit_mean, {}, "logit_normal: the normal's mean")
      .add("logit_std", &C::logit_std, config::positive(), "logit_normal: the normal's standard deviation")
      .add("time_shift", &C::time_shift, config::positive(),
           "logit_normal: SD3's shift s of t' = s t / (1 + (s - 1) t); 1: none")
      .add("prompt_dropout", &C::prompt_dropout, config::fraction(),
           "probability that a sample's T5 and, independently, its CLIP encodings are the empty prompt's")
      .add("guidance", &C::guidance, config::non_negative(),
           "the guidance scale fed to flux-dev's guidance_in in training (flavors with guidance_embed)");
}

}  // namespace titan::train
