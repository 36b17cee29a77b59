#pragma once
// Bicubic resizing, pixel for pixel what Pillow's Image.resize(size, Image.BICUBIC) gives (its
// default filter, which TorchTitan's FLUX loader uses): the cubic kernel with a = -0.5, widened by
// the scale factor when shrinking (antialiasing), coefficients normalised per output pixel and
// rounded to 22-bit fixed point, one horizontal pass then one vertical, each rounded to 8 bits.
// A dimension that keeps its size is not filtered.
#include <cstdint>

#include "titan/data/image/image.h"

namespace titan::data {

Image resize_bicubic(const Image& image, int64_t width, int64_t height);

}  // namespace titan::data
