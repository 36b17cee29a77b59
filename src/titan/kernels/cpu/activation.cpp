#include "titan/kernels/cpu/activation.h"

#include <cmath>

#include "titan/core/parallel.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::kernels::cpu {

namespace {

// Elements per thread at least: below this a thread handoff costs more than the work.
constexpr int64_t kGrain = 1 << 14;

constexpr double kSqrtHalf = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluTanhCubic = 0.044715;
constexpr double kQuickGelu = 1.702;

// sigmoid(v) and 1 - sigmoid(v). 1 / (1 + e^-v) saturates to exactly 0 or 1 for large |v| (e^-v
// overflowing to inf gives 0), never NaN, so no clamping branch is needed. The complement is
// e^-v * s rather than 1 - s, which would cancel to 0 as s -> 1 and lose the gradient's digits
// in the positive tail; where e^-v overflowed, s is 0 and the complement exactly 1.
template <typename T>
struct Sigmoid {
  T s, c;
};
template <typename T>
inline Sigmoid<T> sigmoid(T v) {
  T e = vexp(-v);
  T s = T(1) / (T(1) + e);
  return {s, s > T(0) ? e * s : T(1)};
}

// erfc(a) for a >= 0 as t * exp(-a^2 + P(t)), t = 1 / (1 + a/2): the Chebyshev-fitted form of
// Press et al., Numerical Recipes (2nd ed., sec. 6.2), with relative error below 1.2e-7 for every
// a >= 0. Relative (not absolute) accuracy in the tail is what keeps gelu(x) accurate for negative
// x, where 1 + erf(x / sqrt 2) would cancel; libm's erff does not vectorise.
inline float erfc_nonneg_f32(float a) {
  float t = 1.f / (1.f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_f32(p - a * a);
}

// Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal CDF. f64 calls libm's erfc, one scalar
// call per element (several times the f32 loop's cost): f64 serves gradcheck, not training.
template <typename T>
inline T normal_cdf(T x) {
  if constexpr (sizeof(T) == 4) {
    float z = -x * static_cast<float>(kSqrtHalf);
    float e = erfc_nonneg_f32(std::abs(z));
    return 0.5f * (z >= 0.f ? e : 2.f - e);
  } else {
    return 0.5 * std::erfc(-x * kSqrtHalf);
  }
}

template <typename T>
inline T normal_pdf(T x) {
  return static_cast<T>(kInvSqrt2Pi) * vexp(T(-0.5) * x * x);
}

// 0.5 * (1 + tanh(u)) == sigmoid(2u): the tanh-approximate GELU is x * sigmoid(2u), with no
// cancellation in 1 + tanh for negative u.
template <typename T>
inline T gelu_tanh_u2(T x) {
  return static_cast<T>(2 * kSqrt2OverPi) * (x + static_cast<T>(kGeluTanhCubic) * x * x * x);
}

template <typename T, typename F>
void map1(const T* x, T* y, int64_t n, const F& f) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

template <typename T, typename F>
void map2(const T* a, const T* c, T* y, int64_t n, const F& f) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(a[i], c[i]);
  });
}

}  // namespace

template <typename T>
void activation_fwd(Activation act, const T* x, T* y, int64_t n) {
  switch (act) {
    case Activation::sigmoid: map1(x, y, n, [](T v) { return sigmoid(v).s; }); break;
    case Activation::silu: map1(x, y, n, [](T v) { return v * sigmoid(v).s; }); break;
    case Activation::gelu: map1(x, y, n, [](T v) { return v * normal_cdf(v); }); break;
    case Activation::gelu_tanh: map1(x, y, n, [](T v) { return v * sigmoid(gelu_tanh_u2(v)).s; }); break;
    case Activation::tanh: map1(x, y, n, [](T v) { return std::tanh(v); }); break;
    case Activation::quick_gelu:
      map1(x, y, n, [](T v) { return v * sigmoid(static_cast<T>(kQuickGelu) * v).s; });
      break;
  }
}

template <typename T>
void activation_bwd(Activation act, const T* x, const T* dy, T* dx, int64_t n) {
  switch (act) {
    case Activation::sigmoid:
      map2(x, dy, dx, n, [](T v, T g) {
        auto [s, c] = sigmoid(v);
        return g * s * c;
      });
      break;
    case Activation::silu:
      map2(x, dy, dx, n, [](T v, T g) {
        auto [s, c] = sigmoid(v);
        return g * s * (T(1) + v * c);
      });
      break;
    case Activation::gelu:
      map2(x, dy, dx, n, [](T v, T g) { return g * (normal_cdf(v) + v * normal_pdf(v)); });
      break;
    case Activation::gelu_tanh:
      map2(x, dy, dx, n, [](T v, T g) {
        auto [s, c] = sigmoid(gelu_tanh_u2(v));
        // d(2u)/dx = 2 sqrt(2/pi) (1 + 3 k x^2), k the cubic coefficient
        T du2 = static_cast<T>(2 * kSqrt2OverPi) * (T(1) + static_cast<T>(3 * kGeluTanhCubic) * v * v);
        return g * s * (T(1) + v * c * du2);
      });
      break;
    case Activation::tanh:
      // 1 - tanh(v)^2 = 4 sigmoid(2v) sigmoid(-2v), which keeps its relative accuracy where
      // tanh(v) rounds to +-1.
      map2(x, dy, dx, n, [](T v, T g) {
        auto [s, c] = sigmoid(T(2) * v);
        return g * T(4) * s * c;
      });
      break;
    case Activation::quick_gelu:
      // d/dx x s(a x) = s + a x s (1 - s), the complement exact as in silu's.
      map2(x, dy, dx, n, [](T v, T g) {
        const T a = static_cast<T>(kQuickGelu);
        auto [s, c] = sigmoid(a * v);
        return g * s * (T(1) + a * v * c);
      });
      break;
  }
}

template <typename T>
void softcap_fwd(const T* x, T* y, int64_t n, T cap) {
  const T inv = T(1) / cap;
  map1(x, y, n, [cap, inv](T v) { return cap * vtanh(v * inv); });
}

template <typename T>
void softcap_bwd(const T* x, const T* dy, T* dx, int64_t n, T cap) {
  const T inv2 = T(2) / cap;
  // 1 - tanh(u)^2 = 4 sigmoid(2u) sigmoid(-2u), as tanh's backward above.
  map2(x, dy, dx, n, [inv2](T v, T g) {
    auto [s, c] = sigmoid(v * inv2);
    return g * T(4) * s * c;
  });
}

template <typename T>
void swiglu_fwd(const T* gate, const T* up, T* out, int64_t n) {
  map2(gate, up, out, n, [](T g, T u) { return g * sigmoid(g).s * u; });
}

template <typename T>
void swiglu_bwd(const T* gate, const T* up, const T* d_out, T* d_gate, T* d_up, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T g = gate[i], d = d_out[i];
      auto [s, c] = sigmoid(g);
      d_up[i] = d * g * s;
      d_gate[i] = d * up[i] * s * (T(1) + g * c);
    }
  });
}

#define TITAN_INSTANTIATE(T)                                                    \
  template void activation_fwd<T>(Activation, const T*, T*, int64_t);           \
  template void activation_bwd<T>(Activation, const T*, const T*, T*, int64_t); \
  template void softcap_fwd<T>(const T*, T*, int64_t, T);                       \
  template void softcap_bwd<T>(const T*, const T*, T*, int64_t, T);             \
  template void swiglu_fwd<T>(const T*, const T*, T*, int64_t);                 \
  template void swiglu_bwd<T>(const T*, const T*, const T*, T*, T*, int64_t);
TITAN_INSTANTIATE(float)
TITAN_INSTANTIATE(double)
#undef TITAN_INSTANTIATE

}  // namespace titan::kernels::cpu
