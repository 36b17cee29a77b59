#pragma once
// Branch-free scalar math that GCC auto-vectorises inside loops (to AVX2/AVX-512 when the build
// targets them), unlike libm's expf. Accuracy is within a few ulp of libm over the f32 range.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace titan::kernels::cpu {

// e^x: x = k ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (relative error
// below 1e-7 on that interval), 2^k assembled in the exponent bits.
inline float exp_f32(float x) {
  float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor blocks vectorisation).
  constexpr float kRound = 12582912.0f;
  float k = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - k * 0.693145751953125f - k * 1.428606765330187045e-06f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  float y = p * scale;
  y = x < -87.3f ? 0.f : y;
  y = x > 88.7f ? INFINITY : y;
  return x != x ? x : y;
}
inline double exp_f64(double x) {
  return std::exp(x);
}

// The largest of x[0..n), -inf for n = 0; NaN entries are skipped (a softmax still comes out NaN
// through its sum). GCC will not turn a compare-select reduction over floats into a vector max
// (it would need -ffinite-math-only), not even over independent scalar lanes; on its generic
// vectors the same select is one vector max per 64 bytes.
template <typename T>
inline T row_max(const T* x, int64_t n) {
  typedef T V __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(T));
  constexpr T kLowest = -std::numeric_limits<T>::infinity();
  V lanes = V{} + kLowest;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    V v;
    std::memcpy(&v, x + j, sizeof(v));
    lanes = v > lanes ? v : lanes;
  }
  T top = kLowest;
  for (int64_t l = 0; l < kLanes; ++l) top = lanes[l] > top ? lanes[l] : top;
  for (; j < n; ++j) top = x[j] > top ? x[j] : top;
  return top;
}

template <typename T>
inline T vexp(T x) {
  if constexpr (sizeof(T) == 4)
    return exp_f32(x);
  else
    return exp_f64(x);
}

// tanh(x) = sign(x) (1 - e) / (1 + e) with e = e^(-2|x|) <= 1, so that no exp overflows: within a
// few ulp of 1 absolutely (not of tanh(x) relatively for |x| far below 1), which is what a score
// that is then exponentiated needs. tanh(+-inf) = +-1.
template <typename T>
inline T vtanh(T x) {
  const T e = vexp(T(-2) * std::abs(x));
  return std::copysign((T(1) - e) / (T(1) + e), x);
}

}  // namespace titan::kernels::cpu
