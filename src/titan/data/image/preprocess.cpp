#include "titan/data/image/preprocess.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/core/rng.h"
#include "titan/data/image/resize.h"

namespace titan::data {

std::optional<Image> resize_and_crop(const Image& image, const ImageTransform& transform, uint64_t index) {
  const int64_t size = transform.size;
  TITAN_CHECK(size >= 1, "resize_and_crop: the output size must be at least 1, got ", size);
  if (image.width < size || image.height < size) return std::nullopt;
  const bool wide = image.width >= image.height;
  const double short_side = static_cast<double>(wide ? image.height : image.width);
  const double long_side = static_cast<double>(wide ? image.width : image.height);
  // The same double arithmetic as TorchTitan's math.ceil(output_size / height * width).
  const auto resized_long =
      static_cast<int64_t>(std::ceil(static_cast<double>(size) / short_side * long_side));
  const Image resized =
      wide ? resize_bicubic(image, resized_long, size) : resize_bicubic(image, size, resized_long);
  const int64_t slack = resized_long - size;
  int64_t offset = slack / 2;
  if (transform.crop == ImageCrop::random)
    offset = std::min(slack, static_cast<int64_t>(philox_uniform_f64(transform.seed, index) *
                                                  static_cast<double>(slack + 1)));
  Image square(size, size);
  for (int64_t y = 0; y < size; ++y) {
    const uint8_t* src = wide ? resized.row(y) + offset * 3 : resized.row(y + offset);
    std::copy(src, src + size * 3, square.row(y));
  }
  return square;
}

Tensor image_to_tensor(const Image& square) {
  const int64_t h = square.height, w = square.width;
  Tensor out = Tensor::empty({3, h, w});
  float* dst = out.data<float>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        dst[(c * h + y) * w + x] = static_cast<float>(square.row(y)[x * 3 + c]) / 255.0f * 2.0f - 1.0f;
  return out;
}

std::optional<Tensor> preprocess_image(const Image& image, const ImageTransform& transform, uint64_t index) {
  std::optional<Image> square = resize_and_crop(image, transform, index);
  if (!square) return std::nullopt;
  return image_to_tensor(*square);
}

}  // namespace titan::data
