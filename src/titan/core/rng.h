#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). The value at
// (seed, index) is a pure function, so a tensor's contents do not depend on the thread count,
// the device, or which shard of it a rank fills.
#include <array>
#include <cstdint>

namespace titan {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A seed and a position in its stream. Each fill takes `n` consecutive indices starting at
// `offset` and advances it, so successive fills draw fresh numbers.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t o) { offset_ = o; }
  // Reserves n indices of the stream and returns the first.
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// Element `index` of the stream `seed`: uniform in [0, 1) (24-bit resolution for float).
float philox_uniform(uint64_t seed, uint64_t index);
// Standard normal (Box-Muller on a pair of uniforms drawn from one Philox block).
double philox_normal_f64(uint64_t seed, uint64_t index);
double philox_uniform_f64(uint64_t seed, uint64_t index);

// Fill out[i] with element (first + i) of the stream; parallel over i.
void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t first, float lo, float hi);
void fill_normal(float* out, int64_t n, uint64_t seed, uint64_t first, float mean, float stddev);
void fill_uniform(double* out, int64_t n, uint64_t seed, uint64_t first, double lo, double hi);
void fill_normal(double* out, int64_t n, uint64_t seed, uint64_t first, double mean, double stddev);
// Normal(mean, std) truncated to [a, b], by inverting the CDF (the same law as PyTorch's
// trunc_normal_), so every element costs one uniform and no rejection loop.
void fill_truncated_normal(float* out, int64_t n, uint64_t seed, uint64_t first, float mean,
                           float stddev, float a, float b);

}  // namespace titan
