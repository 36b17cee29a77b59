#include "titan/data/image/jpeg.h"

#include <csetjmp>
#include <cstdlib>
#include <new>

// jpeglib.h uses size_t and FILE without declaring them.
// clang-format off
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include "titan/core/error.h"

namespace titan::data {

namespace {
// As png.cpp: refused before the pixels are allocated.
constexpr uint64_t kMaxPixels = uint64_t{1} << 27;

// libjpeg's error manager extended with where to jump and the message to report.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA) on_error(cinfo);
}

struct Decompress {
  jpeg_decompress_struct cinfo;
  JpegError err;
  Decompress() {
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.mgr.emit_message = on_message;
    err.message[0] = '\0';
    jpeg_create_decompress(&cinfo);
  }
  ~Decompress() { jpeg_destroy_decompress(&cinfo); }
};

struct Compress {
  jpeg_compress_struct cinfo;
  JpegError err;
  unsigned char* buffer = nullptr;  // malloc'ed by libjpeg's memory destination
  unsigned long size = 0;
  Compress() {
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.message[0] = '\0';
    jpeg_create_compress(&cinfo);
  }
  ~Compress() {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
};

// libjpeg longjmps back to the setjmp on an error, so these frames hold no object with a
// destructor: what they fill belongs to the caller.
bool read_header(Decompress& d, std::span<const uint8_t> bytes) {
  if (setjmp(d.err.jump)) return false;
  jpeg_mem_src(&d.cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

bool read_pixels(Decompress& d, Image& image) {
  if (setjmp(d.err.jump)) return false;
  d.cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d.cinfo);
  while (d.cinfo.output_scanline < d.cinfo.output_height) {
    JSAMPROW row = image.row(d.cinfo.output_scanline);
    jpeg_read_scanlines(&d.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d.cinfo);
  return true;
}

bool write_pixels(Compress& c, const Image& image, int quality) {
  if (setjmp(c.err.jump)) return false;
  jpeg_mem_dest(&c.cinfo, &c.buffer, &c.size);
  c.cinfo.image_width = static_cast<JDIMENSION>(image.width);
  c.cinfo.image_height = static_cast<JDIMENSION>(image.height);
  c.cinfo.input_components = 3;
  c.cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c.cinfo);
  jpeg_set_quality(&c.cinfo, quality, TRUE);
  jpeg_start_compress(&c.cinfo, TRUE);
  while (c.cinfo.next_scanline < c.cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.row(c.cinfo.next_scanline));
    jpeg_write_scanlines(&c.cinfo, &row, 1);
  }
  jpeg_finish_compress(&c.cinfo);
  return true;
}
}  // namespace

bool is_jpeg(std::span<const uint8_t> bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name) {
  TITAN_CHECK(is_jpeg(bytes), name, ": not a JPEG file (", bytes.size(),
              " bytes without the JPEG SOI marker); give a PNG or JPEG image");
  Decompress d;
  TITAN_CHECK(read_header(d, bytes), name, ": corrupt or truncated JPEG (libjpeg: ", d.err.message,
              "); re-encode or remove the file");
  const J_COLOR_SPACE space = d.cinfo.jpeg_color_space;
  TITAN_CHECK(space != JCS_CMYK && space != JCS_YCCK, name,
              ": a CMYK JPEG, which titan does not convert (its colours depend on an ICC profile); "
              "convert it to RGB first (e.g. `convert in.jpg -colorspace sRGB out.jpg`)");
  const uint64_t pixels = uint64_t{d.cinfo.image_width} * d.cinfo.image_height;
  TITAN_CHECK(pixels <= kMaxPixels, name, ": a ", d.cinfo.image_width, "x", d.cinfo.image_height,
              " JPEG, larger than the 2^27 pixels titan decodes; downscale it first");
  Image image(d.cinfo.image_width, d.cinfo.image_height);
  TITAN_CHECK(read_pixels(d, image), name, ": corrupt or truncated JPEG (libjpeg: ", d.err.message,
              "); re-encode or remove the file");
  return image;
}

std::string encode_jpeg(const Image& image, int quality) {
  TITAN_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality must lie in [1, 100], got ", quality);
  TITAN_CHECK(
      image.width > 0 && image.height > 0 && image.pixels.size() == size_t(image.width * image.height * 3),
      "encode_jpeg: the image must be non-empty with width * height * 3 bytes, got ", image.width, "x",
      image.height, " with ", image.pixels.size(), " bytes");
  Compress c;
  TITAN_CHECK(write_pixels(c, image, quality), "encode_jpeg: libjpeg failed: ", c.err.message);
  return std::string(reinterpret_cast<const char*>(c.buffer), c.size);
}

}  // namespace titan::data
