#include "titan/data/image/png.h"

#include <png.h>

#include <cstring>
#include <memory>
#include <vector>

#include "titan/core/error.h"

namespace titan::data {

namespace {
// Larger images are refused before their pixels are allocated: a corrupt or hostile header could
// otherwise ask for gigabytes. 2^27 pixels is an 11585-pixel square, beyond any training image.
constexpr uint64_t kMaxPixels = uint64_t{1} << 27;

// What libpng's callbacks reach through their user pointer: the input and the first error.
struct PngIo {
  std::span<const uint8_t> bytes = {};
  size_t pos = 0;
  std::string* out = nullptr;  // when encoding
  char message[256] = {};
};

void on_error(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof(io->message), "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep data, size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->bytes.size() - io->pos) png_error(png, "the file ends early (truncated)");
  std::memcpy(data, io->bytes.data() + io->pos, n);
  io->pos += n;
}

void write_bytes(png_structp png, png_bytep data, size_t n) {
  static_cast<PngIo*>(png_get_io_ptr(png))->out->append(reinterpret_cast<const char*>(data), n);
}

void flush_nothing(png_structp) {}

struct ReadHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ReadHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct WriteHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~WriteHandles() { png_destroy_write_struct(&png, info ? &info : nullptr); }
};

// The decode proper. libpng longjmps back to the setjmp here on an error, so this frame holds no
// object with a destructor: everything it fills belongs to the caller. Returns false on an error
// (the message is in the PngIo).
bool read_rgb_or_rgba(png_structp png, png_infop info, std::vector<uint8_t>& buffer,
                      std::vector<png_bytep>& rows, png_uint_32& width, png_uint_32& height, int& channels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  width = png_get_image_width(png, info);
  height = png_get_image_height(png, info);
  if (uint64_t{width} * height > kMaxPixels) png_error(png, "the image is larger than 2^27 pixels");
  const int color = png_get_color_type(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  channels = png_get_channels(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  buffer.resize(stride * height);
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = buffer.data() + y * stride;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  return true;
}

bool write_rgb(png_structp png, png_infop info, const Image& image, std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  return true;
}
}  // namespace

bool is_png(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0;
}

Image decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  TITAN_CHECK(is_png(bytes), name, ": not a PNG file (", bytes.size(),
              " bytes without the PNG signature); give a PNG or JPEG image");
  PngIo io{.bytes = bytes};
  ReadHandles h;
  h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (h.png) h.info = png_create_info_struct(h.png);
  if (!h.png || !h.info) throw std::bad_alloc();
  png_set_read_fn(h.png, &io, read_bytes);
  std::vector<uint8_t> buffer;
  std::vector<png_bytep> rows;
  png_uint_32 width = 0, height = 0;
  int channels = 0;
  TITAN_CHECK(read_rgb_or_rgba(h.png, h.info, buffer, rows, width, height, channels), name,
              ": corrupt or truncated PNG (libpng: ", io.message, "); re-encode or remove the file");
  Image image(width, height);
  const size_t n = size_t{width} * height;
  const uint8_t* in = buffer.data();
  uint8_t* out = image.pixels.data();
  if (channels == 3) {
    std::memcpy(out, in, n * 3);
  } else {
    for (size_t i = 0; i < n; ++i, in += 4, out += 3)
      for (int c = 0; c < 3; ++c) out[c] = over_white(in[c], in[3]);
  }
  return image;
}

std::string encode_png(const Image& image) {
  TITAN_CHECK(
      image.width > 0 && image.height > 0 && image.pixels.size() == size_t(image.width * image.height * 3),
      "encode_png: the image must be non-empty with width * height * 3 bytes, got ", image.width, "x",
      image.height, " with ", image.pixels.size(), " bytes");
  std::string out;
  PngIo io{.out = &out};
  WriteHandles h;
  h.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (h.png) h.info = png_create_info_struct(h.png);
  if (!h.png || !h.info) throw std::bad_alloc();
  png_set_write_fn(h.png, &io, write_bytes, flush_nothing);
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) rows[size_t(y)] = const_cast<uint8_t*>(image.row(y));
  TITAN_CHECK(write_rgb(h.png, h.info, image, rows), "encode_png: libpng failed: ", io.message);
  return out;
}

}  // namespace titan::data
