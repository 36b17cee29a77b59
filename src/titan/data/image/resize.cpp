#include "titan/data/image/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/core/error.h"

namespace titan::data {

namespace {
constexpr int kPrecisionBits = 32 - 8 - 2;  // what keeps a 2-pass 8-bit sum inside int32

double cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// Pillow's (int)(x + 0.5): a half added, then truncation toward zero (lround differs below zero).
int64_t pillow_round(double x) {
  // NOLINTNEXTLINE(bugprone-incorrect-roundings)
  return static_cast<int64_t>(x + 0.5);
}

// For each output position along one axis: the first input index, the count, and that many
// fixed-point weights (`taps` per position).
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;
  int64_t taps = 0;
};

Taps make_taps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  Taps t;
  t.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out_size));
  t.count.resize(size_t(out_size));
  t.weights.assign(size_t(out_size * t.taps), 0);
  std::vector<double> w(size_t(t.taps));
  // Multiplied by the inverse, not divided by the scale, as Pillow's source does: a last-bit
  // difference in a weight can move an output byte by one.
  const double inverse_scale = 1.0 / filter_scale;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(pillow_round(center - support), 0);
    const int64_t hi = std::min<int64_t>(pillow_round(center + support), in_size);
    const int64_t n = hi - lo;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      w[size_t(i)] = cubic((static_cast<double>(i + lo) - center + 0.5) * inverse_scale);
      sum += w[size_t(i)];
    }
    for (int64_t i = 0; i < n; ++i) {
      const double k = (sum != 0.0 ? w[size_t(i)] / sum : w[size_t(i)]) * double(1 << kPrecisionBits);
      t.weights[size_t(o * t.taps + i)] = static_cast<int32_t>(k < 0 ? k - 0.5 : k + 0.5);
    }
    t.first[size_t(o)] = lo;
    t.count[size_t(o)] = n;
  }
  return t;
}

uint8_t to_u8(int32_t acc) {
  if (acc <= 0) return 0;
  if (acc >= (255 << kPrecisionBits)) return 255;
  return static_cast<uint8_t>(acc >> kPrecisionBits);
}

Image resize_rows(const Image& in, int64_t width) {
  const Taps t = make_taps(in.width, width);
  Image out(width, in.height);
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int64_t x = 0; x < width; ++x) {
      const int32_t* k = &t.weights[size_t(x * t.taps)];
      const uint8_t* p = src + t.first[size_t(x)] * 3;
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int64_t i = 0; i < t.count[size_t(x)]; ++i) acc += p[i * 3 + c] * k[i];
        dst[x * 3 + c] = to_u8(acc);
      }
    }
  }
  return out;
}

Image resize_columns(const Image& in, int64_t height) {
  const Taps t = make_taps(in.height, height);
  Image out(in.width, height);
  const int64_t stride = in.width * 3;
  for (int64_t y = 0; y < height; ++y) {
    const int32_t* k = &t.weights[size_t(y * t.taps)];
    const uint8_t* src = in.row(t.first[size_t(y)]);
    uint8_t* dst = out.row(y);
    for (int64_t x = 0; x < stride; ++x) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      for (int64_t i = 0; i < t.count[size_t(y)]; ++i) acc += src[i * stride + x] * k[i];
      dst[x] = to_u8(acc);
    }
  }
  return out;
}
}  // namespace

Image resize_bicubic(const Image& image, int64_t width, int64_t height) {
  TITAN_CHECK(width > 0 && height > 0 && image.width > 0 && image.height > 0,
              "resize_bicubic: sizes must be "
              "positive, got ",
              image.width, "x", image.height, " -> ", width, "x", height);
  Image out = width == image.width ? image : resize_rows(image, width);
  return height == image.height ? out : resize_columns(out, height);
}

}  // namespace titan::data
