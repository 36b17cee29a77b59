#pragma once
// An image made into a training input the way TorchTitan's FLUX loader does
// (torchtitan/models/flux/flux_datasets.py, _process_cc12m_image): an image whose short side is
// below `size` is not used; otherwise the short side is resized to `size` (the long side to
// ceil(size / short * long)) with Pillow's bicubic filter (resize.h), a `size` square is cut from
// it, and the bytes become floats v / 255 * 2 - 1 in [-1, 1], channels first.
#include <cstdint>
#include <optional>

#include "titan/core/tensor.h"
#include "titan/data/image/image.h"

namespace titan::data {

enum class ImageCrop {
  // The square's offset along the long side is uniform over every position, drawn from Philox at
  // (seed, sample index): the same (seed, index) gets the same crop on every run and after a resume.
  random,
  // The middle square (offset rounded down): for validation.
  center,
};

struct ImageTransform {
  int64_t size = 256;
  ImageCrop crop = ImageCrop::random;
  uint64_t seed = 0;
};

// The resized square (HWC bytes), or nullopt when the image is smaller than `size` either way.
// `index` picks the random crop's draw (a sample's position in its data set).
std::optional<Image> resize_and_crop(const Image& image, const ImageTransform& transform, uint64_t index);

// f32 [3, size, size] in [-1, 1] from a square of that size.
Tensor image_to_tensor(const Image& square);

// Both: nullopt when the image is too small.
std::optional<Tensor> preprocess_image(const Image& image, const ImageTransform& transform, uint64_t index);

}  // namespace titan::data
