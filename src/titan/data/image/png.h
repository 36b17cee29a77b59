#pragma once
// PNG through libpng. Every colour type and bit depth decodes to 8-bit RGB (image.h): grey is
// repeated into the three channels, palettes are expanded, 16-bit samples keep their high byte
// (as Pillow reads 16-bit RGB). Alpha (an alpha channel or a palette's tRNS) is composited over
// white rather than dropped: the colour under a fully transparent pixel is arbitrary (often
// black), and a training image should look like what a viewer shows, which is white for the
// transparent parts of web images (logos, cut-outs).
//
// Errors — not a PNG, a truncated or corrupt stream, a bad CRC — are titan::Error naming `name`
// (the file, or "shard.tar:member") and libpng's reason. libpng reports them by longjmp, which is
// caught in a frame that owns nothing, so nothing leaks and no C++ destructor is skipped.
#include <span>
#include <string>

#include "titan/data/image/image.h"

namespace titan::data {

// Whether `bytes` start with the PNG signature.
bool is_png(std::span<const uint8_t> bytes);

Image decode_png(std::span<const uint8_t> bytes, const std::string& name);

// An 8-bit RGB PNG, zlib level 6.
std::string encode_png(const Image& image);

}  // namespace titan::data
