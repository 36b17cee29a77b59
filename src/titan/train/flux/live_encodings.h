#pragma once
// FLUX training's data without an encoding cache: the frozen encoders (conditioning.h) run on each
// batch's images and captions as it is drawn, without gradients, every rank on its own rows. Given
// a shard group of several ranks, the encoders' weights are FSDP-sharded over it (conditioning.h:
// block by block); then every rank must ask for samples as often as the others
// (FluxBatches does: every rank draws each micro-batch and validation batch). The images are made as
// `titan flux encode` makes them (resized, a square cut). Under the random crop each draw of a
// sample cuts its own square (the draw is the batches', flux_batches.h: a function of the seed
// and the sample's slot, so a resumed run cuts what the uninterrupted one would), which a cache,
// cut once, cannot; validation takes the centre. Under the centre crop the same data, encoders
// and seed give the batches of a cache encoded with `--crop center` (to float rounding).
//
// Bad data: under BadData::skip every image is decoded once when the source is built, and those
// that do not decode or are smaller than the image size are left out (as the cache's encoder
// leaves them out), so that sample positions, and with them the draws, are the same on every rank
// and in every run; under BadData::error such an image stops training when it is drawn, naming
// the file.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "titan/data/dataset.h"
#include "titan/data/image/image_dataset.h"
#include "titan/data/image/preprocess.h"
#include "titan/dist/process_group.h"
#include "titan/train/flux/conditioning.h"
#include "titan/train/flux/sample_encodings.h"

namespace titan::train::flux {

struct LiveEncodingsOptions {
  std::string data_path;  // an image-caption folder or webdataset .tar shards (image_dataset.h)
  ConditioningPaths encoders;
  int64_t t5_length = 256;
  int64_t image_size = 256;
  data::ImageCrop crop = data::ImageCrop::random;  // training's; validation's is the centre
  data::BadData bad_data = data::BadData::error;
  std::string data_key = "flux.data_path";  // what messages call `data_path`
  // FSDP of the encoders' weights over shard_group when it has several ranks (replicated over
  // replicate_group, HSDP).
  std::optional<dist::ProcessGroup> shard_group = std::nullopt, replicate_group = std::nullopt;
};

class LiveEncodings : public SampleEncodings {
 public:
  explicit LiveEncodings(const LiveEncodingsOptions& options);
  ~LiveEncodings() override;

  int64_t size() const override { return static_cast<int64_t>(kept_.size()); }
  // One batch through the encoders.
  std::vector<std::map<std::string, Tensor>> samples(std::span<const int64_t> indices,
                                                     std::span<const uint64_t> crop_draws) override;
  const std::map<std::string, Tensor>& empty_prompt() const override { return empty_prompt_; }
  double scaling_factor() const override;
  double shift_factor() const override;
  std::string description() const override;

  const models::autoencoder::Autoencoder& autoencoder() const { return stack_->autoencoder(); }
  bool sharded() const { return stack_->sharded(); }
  // What BadData::skip left out of the data set: reason -> count.
  const std::map<std::string, int64_t>& skipped() const { return skipped_; }

 private:
  LiveEncodingsOptions options_;
  data::ImageTransform center_;
  std::unique_ptr<ConditioningStack> stack_;
  std::unique_ptr<data::ImageCaptionDataset> dataset_;
  std::vector<int64_t> kept_;  // the data-set position of each sample
  std::map<std::string, int64_t> skipped_;
  std::map<std::string, Tensor> empty_prompt_;
};

}  // namespace titan::train::flux
