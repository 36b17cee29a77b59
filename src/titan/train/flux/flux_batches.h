#pragma once
// FLUX training batches drawn from the samples' encodings (sample_encodings.h: an encoding cache or
// the encoders run every step). Every draw is a function of (seed, global sample slot) alone,
// Philox-counter based: which sample a slot reads, its
// latent's draw from the stored mean/logvar, its noise, its t, its prompt dropout and (encoders run
// every step under a random crop) where its image's square is cut. So a resumed
// run continues bit-exactly with no data state in the checkpoint, and one rank reading a global
// batch draws what N ranks reading their shares of it draw.
//
// Slot g of step s (1-based), micro-batch m, data-parallel rank r, row j:
//   g = ((s - 1) * micro_batches + m) * dp_world * local_batch + r * local_batch + j
// reads sample perm_e[g mod n] of the n training samples, perm_e a shuffle of epoch e = g / n.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/train/config/flux_config.h"
#include "titan/train/flux/sample_encodings.h"

namespace titan::train::flux {

struct FluxBatch {
  Tensor x0;     // f32 [B, L_img, C p^2]: packed (latent - shift) * scale
  Tensor noise;  // f32, x0's shape
  Tensor t;      // f32 [B]
  Tensor txt;    // f32 [B, L_txt, context]: T5 (the empty prompt's where dropped)
  Tensor y;      // f32 [B, vec]: CLIP pooled (the empty prompt's where dropped)
  int64_t height = 0, width = 0;  // latent pixels
};

class FluxBatches {
 public:
  // Samples [first, first + count) of `source`; `patch_size` packs the latents.
  FluxBatches(std::shared_ptr<SampleEncodings> source, int64_t first, int64_t count, const FluxConfig& cfg,
              uint64_t seed, int64_t patch_size);
  int64_t size() const { return count_; }
  // The training rows of slots [first_slot, first_slot + rows).
  FluxBatch training(int64_t first_slot, int64_t rows);
  // Validation: samples `samples` (positions in this range) at the one timestep t, their latents
  // the stored means and their noise fixed by their position, no prompt dropout. The last call's
  // encodings are kept: validation asks for the same samples at each of its timesteps.
  FluxBatch validation(const std::vector<int64_t>& samples, double t);

 private:
  const std::vector<int64_t>& permutation(int64_t epoch);
  // The encodings of samples (positions in this range), their squares cut at `crop_draws` (none:
  // the centre; sample_encodings.h).
  std::vector<std::map<std::string, Tensor>> encodings(const std::vector<int64_t>& samples,
                                                       const std::vector<uint64_t>& crop_draws);
  FluxBatch assemble(const std::vector<std::map<std::string, Tensor>>& encoded,
                     const std::vector<uint64_t>& keys, bool train, double fixed_t);

  std::shared_ptr<SampleEncodings> source_;
  int64_t first_, count_;
  FluxConfig cfg_;
  uint64_t seed_;
  int64_t patch_size_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
  std::vector<int64_t> validation_samples_;
  std::vector<std::map<std::string, Tensor>> validation_encodings_;
};

}  // namespace titan::train::flux
