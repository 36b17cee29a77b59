#include "titan/train/flux/live_encodings.h"

#include <numeric>

#include "titan/core/error.h"

namespace titan::train::flux {

LiveEncodings::LiveEncodings(const LiveEncodingsOptions& options)
    : options_(options), center_{.size = options.image_size, .crop = data::ImageCrop::center} {
  stack_ = std::make_unique<ConditioningStack>(options.encoders, options.t5_length);
  if (options.shard_group && options.shard_group->size() > 1) {
    TITAN_CHECK(options.replicate_group.has_value(), "flux: the encoders' shard group needs its replicate group");
    stack_->shard(*options.shard_group, *options.replicate_group);
  }
  dataset_ = std::make_unique<data::ImageCaptionDataset>(data::ImageDatasetOptions{
      .path = options.data_path, .bad_data = options.bad_data, .path_key = options.data_key});
  if (options.bad_data == data::BadData::skip) {
    for (int64_t i = 0; i < dataset_->size(); ++i) {
      data::ImageSample sample;
      try {
        sample = dataset_->read(i);
      } catch (const Error&) {
        ++skipped_["image does not decode"];
        continue;
      }
      // Whether an image is large enough does not depend on where its square is cut.
      if (!data::resize_and_crop(sample.image, center_, static_cast<uint64_t>(i))) {
        ++skipped_["image smaller than the image size"];
        continue;
      }
      kept_.push_back(i);
    }
  } else {
    kept_.resize(static_cast<size_t>(dataset_->size()));
    std::iota(kept_.begin(), kept_.end(), 0);
  }
  TITAN_CHECK(!kept_.empty(), options.data_key, " ", options.data_path, ": every one of its ", dataset_->size(),
              " images was left out (training.bad_data = skip); check the images against flux.image_size = ",
              options.image_size);
  const std::string empty_caption;
  empty_prompt_ = stack_->encode_text({&empty_caption, 1});
}

LiveEncodings::~LiveEncodings() = default;

double LiveEncodings::scaling_factor() const { return stack_->autoencoder().args().scaling_factor; }
double LiveEncodings::shift_factor() const { return stack_->autoencoder().args().shift_factor; }

std::string LiveEncodings::description() const {
  return stack_->description() + "; images " + std::to_string(options_.image_size) + " px, " +
         (options_.crop == data::ImageCrop::random ? "a random crop at each draw (validation: the center)"
                                                   : "center crop") +
         "; data " + options_.data_path;
}

std::vector<std::map<std::string, Tensor>> LiveEncodings::samples(std::span<const int64_t> indices,
                                                                std::span<const uint64_t> crop_draws) {
  TITAN_CHECK(crop_draws.empty() || crop_draws.size() == indices.size(), "flux: ", crop_draws.size(),
              " crop draws for ", indices.size(), " samples; give one per sample or none");
  const auto b = static_cast<int64_t>(indices.size()), side = options_.image_size;
  Tensor images = Tensor::empty({b, 3, side, side});
  std::vector<std::string> captions;
  std::vector<int64_t> positions;
  for (int64_t k = 0; k < b; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    TITAN_CHECK(i >= 0 && i < size(), "flux: sample ", i, " is outside [0, ", size(), ") of ", options_.data_key,
                " ", options_.data_path);
    const int64_t position = kept_[static_cast<size_t>(i)];
    // Under BadData::error, an image that does not decode throws here, naming its file.
    const data::ImageSample sample = dataset_->read(position);
    // ImageTransform's random square is drawn at (seed, index): the draw is the seed.
    const bool random = options_.crop == data::ImageCrop::random && !crop_draws.empty();
    const data::ImageTransform transform =
        random ? data::ImageTransform{.size = side, .crop = data::ImageCrop::random, .seed = crop_draws[static_cast<size_t>(k)]}
               : center_;
    const std::optional<Tensor> image = data::preprocess_image(sample.image, transform, static_cast<uint64_t>(position));
    TITAN_CHECK(image.has_value(), options_.data_key, ": sample ", position, " ('", sample.key, "') is ",
                sample.image.width, "x", sample.image.height, ", smaller than flux.image_size = ", side,
                " on a side; set training.bad_data = \"skip\" to leave such images out");
    images.narrow(0, k, 1).copy_(*image);
    captions.push_back(sample.caption);
    positions.push_back(position);
  }
  std::map<std::string, Tensor> encoded = stack_->encode_text(captions);
  encoded.merge(stack_->encode_images(images));
  std::vector<std::map<std::string, Tensor>> out(static_cast<size_t>(b));
  for (int64_t k = 0; k < b; ++k) {
    std::map<std::string, Tensor>& row = out[static_cast<size_t>(k)];
    for (const auto& [name, t] : encoded) row.emplace(name, t.narrow(0, k, 1).squeeze(0).contiguous());
    row.emplace("index", Tensor::from_vector<int64_t>({positions[static_cast<size_t>(k)]}, {1}));
  }
  return out;
}

}  // namespace titan::train::flux
