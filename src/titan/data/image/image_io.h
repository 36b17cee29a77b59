#pragma once
// Images from files or from memory (tar members), told PNG or JPEG by their first bytes, not
// their names; written as PNG or JPEG by the name's extension.
#include <filesystem>
#include <span>
#include <string>

#include "titan/data/image/image.h"

namespace titan::data {

// `name` is what errors call the bytes (a file, or "shard.tar:member").
Image decode_image(std::span<const uint8_t> bytes, const std::string& name);

// Errors (a missing, empty, corrupt or truncated file, or one that is neither PNG nor JPEG)
// name the file.
Image read_image(const std::filesystem::path& path);

// .png, or .jpg / .jpeg at `jpeg_quality`; any other extension is an error.
void write_image(const std::filesystem::path& path, const Image& image, int jpeg_quality = 90);

}  // namespace titan::data
