#pragma once
// What FLUX training reads of its data: the frozen encoders' outputs for sample i (T5's hidden
// states, CLIP's pooled vector, the autoencoder's latent mean and log-variance) and the empty
// prompt's, whether read from an encoding cache (encoding_cache.h) or computed every step
// (live_encodings.h). FluxBatches (flux_batches.h) draws its batches from either alike.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::train::flux {

class SampleEncodings {
 public:
  virtual ~SampleEncodings() = default;
  virtual int64_t size() const = 0;
  // The encodings of samples `indices` (positions in [0, size())), one map per index in order:
  // "t5" [L, d], "clip_pooled" [d'], "latent_mean" and "latent_logvar" [C, h, w], without the
  // batch dimension. A sample's encodings do not depend on which others are asked with it.
  // `crop_draws`, empty or one per index, are the draws of a source that cuts its images as it
  // reads them under a random crop (live_encodings.h): a draw picks the square, and none (as for
  // validation) the centre. A cache's squares were cut when it was encoded; it takes no draws.
  virtual std::vector<std::map<std::string, Tensor>> samples(std::span<const int64_t> indices,
                                                             std::span<const uint64_t> crop_draws) = 0;
  // The empty caption's "t5" and "clip_pooled" (prompt dropout).
  virtual const std::map<std::string, Tensor>& empty_prompt() const = 0;
  // The autoencoder's: training's x0 = (latent - shift_factor) * scaling_factor.
  virtual double scaling_factor() const = 0;
  virtual double shift_factor() const = 0;
  // Names the source, its encoders and options, for the log.
  virtual std::string description() const = 0;
};

}  // namespace titan::train::flux
