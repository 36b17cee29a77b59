#pragma once
// An 8-bit RGB picture, rows top to bottom, each pixel R, G, B (HWC): what every decoder here
// produces and every encoder takes, whatever the file held (grey, palette, alpha, 16 bits).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace titan::data {

struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3

  Image() = default;
  Image(int64_t w, int64_t h) : width(w), height(h), pixels(static_cast<size_t>(w * h * 3)) {}
  uint8_t* row(int64_t y) { return pixels.data() + y * width * 3; }
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * 3; }
  bool operator==(const Image&) const = default;
};

// Colour `c` (0..255) seen through opacity `alpha` over white, rounded to nearest: how the
// decoders flatten transparency (png.h says why white).
inline uint8_t over_white(uint32_t c, uint32_t alpha) {
  return static_cast<uint8_t>((c * alpha + 255u * (255u - alpha) + 127u) / 255u);
}

}  // namespace titan::data
