#pragma once
// Bicubic resizing as Pillow's Image.resize(size, Image.BICUBIC) (its default filter, which
// TorchTitan's FLUX loader uses) computes it in its published source (libImaging/Resample.c): the
// cubic kernel with a = -0.5, widened by the scale factor when shrinking (antialiasing),
// coefficients normalised per output pixel and rounded to 22-bit fixed point, one horizontal pass
// then one vertical, each rounded to 8 bits; a dimension that keeps its size is not filtered.
// Pillow 13 (the reference venv's) runs the vertical pass first for some sizes (always when the
// height shrinks and the width grows; by a rule it does not document when both shrink), which
// moves some bytes by 1 or 2 levels; where it keeps the published order the bytes are equal.
#include <cstdint>

#include "titan/data/image/image.h"

namespace titan::data {

Image resize_bicubic(const Image& image, int64_t width, int64_t height);

}  // namespace titan::data
