#pragma once
// JPEG through libjpeg-turbo, decoded with its defaults (accurate integer IDCT, smooth chroma
// upsampling), which are Pillow's, so pixels equal Pillow's where both link the same IDCT.
// Greyscale decodes to RGB by repeating the channel. CMYK and YCCK (print files, rare in image
// data sets) are refused with a clear error rather than converted: without the file's ICC
// profile any conversion is a guess at the colours.
//
// A corrupt or truncated stream is a titan::Error naming `name` and libjpeg's reason. libjpeg
// calls a "Premature end of JPEG file" or "Corrupt JPEG data" only a warning and fills the
// missing part with grey; here every warning but "extraneous bytes before marker" (harmless
// padding some encoders write) is an error, as Pillow refuses truncated files.
#include <span>
#include <string>

#include "titan/data/image/image.h"

namespace titan::data {

// Whether `bytes` start with a JPEG's SOI marker.
bool is_jpeg(std::span<const uint8_t> bytes);

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name);

// Baseline JPEG with 4:2:0 chroma subsampling (libjpeg's default) at `quality` in [1, 100].
std::string encode_jpeg(const Image& image, int quality = 90);

}  // namespace titan::data
