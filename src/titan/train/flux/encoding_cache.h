#pragma once
// A cache of what FLUX's frozen encoders make of an image-caption data set, so that training reads
// encodings instead of running T5, CLIP and the autoencoder every step (MaxDiffusion's
// cache_latents_text_encoder_outputs).
//
// On disk, a folder:
//   shard-00000.safetensors ...  samples [k * shard_samples, (k + 1) * shard_samples) of the data
//                                set: each tensor the encoder returned, one row per sample that
//                                was kept, and "index" (i64, the samples' positions in the data
//                                set); metadata: the samples' keys and captions (JSON arrays) and
//                                the cache's description
//   empty_prompt.safetensors     the encodings of the empty caption (prompt dropout)
//   index.json                   written last: the shards, the sample count and the description
// Shards are written whole or not at all (a temporary file renamed once fsync'ed), so a run that
// was stopped resumes by writing only the shards that are missing; a shard already there is kept
// when it was written with the same description and refused otherwise. The same data, encoders and
// options give the same bytes, whether the run was interrupted or not. Shard k goes to rank
// k mod world, so ranks write disjoint shards and need no collective but the final barrier.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "titan/core/tensor.h"
#include "titan/data/dataset.h"
#include "titan/data/image/image_dataset.h"
#include "titan/data/image/preprocess.h"
#include "titan/dist/process_group.h"
#include "titan/train/flux/sample_encodings.h"

namespace titan::train::flux {

// What a batch of samples becomes: tensors whose first dimension is the batch, the same names and
// row shapes for every batch. `images` are f32 [3, S, S] in [-1, 1].
using EncodeSamples =
    std::function<std::map<std::string, Tensor>(std::span<const Tensor> images, std::span<const std::string> captions)>;

struct EncodingCacheOptions {
  std::string out;
  data::ImageTransform transform;
  int64_t shard_samples = 256;
  int64_t batch = 8;
  // skip: an image that does not decode or is smaller than transform.size is left out and counted;
  // error: it stops the run, naming the file.
  data::BadData bad_data = data::BadData::error;
  // Names the encoders and options; a shard written under another description is refused rather
  // than mixed in.
  std::string description;
  // The autoencoder's latent scaling and shift (its config.json's), recorded in index.json so that
  // training maps the cached latents as the decoder that samples will read them expects.
  double scaling_factor = 0.3611;
  double shift_factor = 0.1159;
};

struct EncodingCacheReport {
  int64_t shards = 0;         // in the cache
  int64_t shards_kept = 0;    // of those, found complete from an earlier run (this rank's)
  int64_t samples = 0;        // encoded by this rank in this run
  std::map<std::string, int64_t> skipped;  // reason -> count, this rank's
};

// Called after each batch this rank encodes: samples done (this rank) of this rank's total.
using CacheProgress = std::function<void(int64_t done, int64_t total)>;

EncodingCacheReport write_encoding_cache(const data::ImageCaptionDataset& dataset, const EncodeSamples& encode,
                                         const std::map<std::string, Tensor>& empty_prompt,
                                         const EncodingCacheOptions& options, dist::ProcessGroup& group,
                                         const CacheProgress& progress = {});

// A finished cache, for training: sample i's tensors (rows of its shard, copied out).
class EncodingCache : public SampleEncodings {
 public:
  // Throws when `dir` holds no index.json or a shard it lists is missing or of another description.
  explicit EncodingCache(const std::string& dir);
  ~EncodingCache() override;
  EncodingCache(EncodingCache&&) noexcept;
  int64_t size() const override;
  std::string description() const override;
  // Each tensor of sample i without the batch dimension, plus "index" ([1]: its data-set position).
  std::map<std::string, Tensor> sample(int64_t i) const;
  std::vector<std::map<std::string, Tensor>> samples(std::span<const int64_t> indices,
                                                     std::span<const uint64_t> crop_draws) override;
  std::string caption(int64_t i) const;
  const std::map<std::string, Tensor>& empty_prompt() const override;
  double scaling_factor() const override;
  double shift_factor() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace titan::train::flux
