#include "titan/core/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/parallel.h"

namespace titan {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

namespace {
// One Philox call per index: counter = (index, 0), key = seed. Four words come back; uniforms use
// the first (and second for f64), normals use a pair.
std::array<uint32_t, 4> block(uint64_t seed, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
double to_unit53(uint32_t hi, uint32_t lo) {
  uint64_t v = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * 0x1.0p-53;
}
double box_muller(uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) {
  double u1 = 1.0 - to_unit53(a0, a1);  // (0, 1]: log stays finite
  double u2 = to_unit53(b0, b1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Inverse of the error function, refined by two Newton steps on erf from a simple initial guess.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    w -= 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                     -0.00125372503, -0.00417768164, 0.246640727, 1.50140941})
      p = p * w + c;
    x = p * y;
  } else {
    w = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = p * w + c;
    x = p * y;
  }
  for (int i = 0; i < 2; ++i) {
    double err = std::erf(x) - y;
    x -= err / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}
}  // namespace

double philox_uniform_f64(uint64_t seed, uint64_t index) {
  auto r = block(seed, index);
  return to_unit53(r[0], r[1]);
}
float philox_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(block(seed, index)[0] >> 8) * 0x1.0p-24f;
}
double philox_normal_f64(uint64_t seed, uint64_t index) {
  auto r = block(seed, index);
  return box_muller(r[0], r[1], r[2], r[3]);
}

namespace {
template <typename T, typename F>
void fill(T* out, int64_t n, F f) {
  parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(i));
  });
}
}  // namespace

void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t first, float lo, float hi) {
  fill(out, n, [&](int64_t i) { return lo + (hi - lo) * philox_uniform(seed, first + i); });
}
void fill_normal(float* out, int64_t n, uint64_t seed, uint64_t first, float mean, float sd) {
  fill(out, n, [&](int64_t i) { return mean + sd * philox_normal_f64(seed, first + i); });
}
void fill_uniform(double* out, int64_t n, uint64_t seed, uint64_t first, double lo, double hi) {
  fill(out, n, [&](int64_t i) { return lo + (hi - lo) * philox_uniform_f64(seed, first + i); });
}
void fill_normal(double* out, int64_t n, uint64_t seed, uint64_t first, double mean, double sd) {
  fill(out, n, [&](int64_t i) { return mean + sd * philox_normal_f64(seed, first + i); });
}
void fill_truncated_normal(float* out, int64_t n, uint64_t seed, uint64_t first, float mean,
                           float sd, float a, float b) {
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)); };
  double lo = cdf((a - mean) / sd), hi = cdf((b - mean) / sd);
  fill(out, n, [&](int64_t i) {
    double u = lo + (hi - lo) * philox_uniform_f64(seed, first + i);
    double x = mean + sd * std::numbers::sqrt2 * erfinv(2.0 * u - 1.0);
    return std::clamp(x, static_cast<double>(a), static_cast<double>(b));
  });
}

}  // namespace titan
