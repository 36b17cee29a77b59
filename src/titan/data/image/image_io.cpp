#include "titan/data/image/image_io.h"

#include <algorithm>
#include <cctype>

#include "titan/core/error.h"
#include "titan/core/file_io.h"
#include "titan/data/image/jpeg.h"
#include "titan/data/image/png.h"

namespace titan::data {

Image decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  TITAN_CHECK(!bytes.empty(), name,
              ": an empty file where an image was expected; remove it or give a PNG or JPEG");
  if (is_png(bytes)) return decode_png(bytes, name);
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name);
  TITAN_CHECK(false, name,
              ": neither a PNG nor a JPEG (its first bytes are neither signature); titan reads "
              "PNG and JPEG images");
  return {};
}

Image read_image(const std::filesystem::path& path) {
  MappedFile file(path);
  const std::string_view b = file.bytes();
  return decode_image({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, path.string());
}

void write_image(const std::filesystem::path& path, const Image& image, int jpeg_quality) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string bytes;
  if (ext == ".png") {
    bytes = encode_png(image);
  } else {
    TITAN_CHECK(ext == ".jpg" || ext == ".jpeg", path.string(),
                ": cannot tell the image format from the extension; name it .png, .jpg or .jpeg");
    bytes = encode_jpeg(image, jpeg_quality);
  }
  OutFile out(path);
  out.write(bytes.data(), bytes.size());
  out.close();
}

}  // namespace titan::data
