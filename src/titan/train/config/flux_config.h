#pragma once
// The [flux] section: FLUX flow-matching training (model.name = "flux"), read by
// train/flux/flux_workload.*. Defaults follow TorchTitan's flux experiment (uniform t, prompt
// dropout 0.447) and the autoencoder's published scaling and shift.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct FluxConfig {
  // The encoding cache `titan flux encode` wrote (train/flux/encoding_cache.h). Training reads it,
  // or (exactly one of the two) runs the frozen encoders every step over data_path.
  std::string cache_path = {};
  // An image-caption data set (a folder of image + .txt pairs, or webdataset .tar shards) and the
  // diffusers FLUX folder whose encoders (text_encoder/, tokenizer/, text_encoder_2/,
  // tokenizer_2/, vae/) run on it every step (train/flux/live_encodings.h).
  std::string data_path = {};
  std::string pipeline_path = {};
  // A second cache held out for validation; empty: the last validation_samples of cache_path (or
  // data_path), which training then leaves out.
  std::string validation_cache_path = {};
  int64_t validation_samples = 8;
  // The image size (pixels) and T5 length the cache holds; what --dry-run and MFU count before
  // the cache is read, checked against it when it is.
  int64_t image_size = 256;
  int64_t t5_length = 256;
  int64_t latent_downscale = 8;  // the autoencoder's; FLUX.1's downsamples by 8
  // With data_path: how a training image's square is cut, "random" (afresh at each draw, as
  // TorchTitan's loader cuts it) or "center"; validation's is the centre.
  std::string crop = "random";
  std::string timestep_sampling = "uniform";  // uniform | logit_normal
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double time_shift = 1.0;  // SD3's t' = s t / (1 + (s - 1) t); 1: none
  double prompt_dropout = 0.447;
  double guidance = 1.0;  // the guidance scale flux-dev's guidance_in is fed in training
};

void declare_keys(config::Keys<FluxConfig>& keys);

}  // namespace titan::train
