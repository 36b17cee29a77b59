#include "titan/kernels/cpu/group_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

namespace {

// Below this many elements per task, waking threads costs more than it saves.
constexpr int64_t kGrainElems = 16384;

int64_t grain(int64_t elems_per_item) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, elems_per_item));
}

// Values per block of the statistics pass: 8 KiB of f32, well within L1.
constexpr int64_t kBlock = 2048;

// Count, mean and sum of squared deviations of a run of values.
struct Moments {
  double n = 0, mean = 0, m2 = 0;
  void merge(const Moments& o) {
    const double total = n + o.n, delta = o.mean - mean;
    if (total == 0) return;
    mean += delta * o.n / total;
    m2 += o.m2 + delta * delta * n * o.n / total;
    n = total;
  }
};

// Two passes over one block: its mean, then its centred sums, whose first-order term corrects the
// mean's rounding error.
template <typename T>
Moments block_moments(const T* x, int64_t len) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < len; ++i) s += x[i];
  const T mu = s / static_cast<T>(len);
  T sc = 0, ss = 0;
#pragma omp simd reduction(+ : sc, ss)
  for (int64_t i = 0; i < len; ++i) {
    const T v = x[i] - mu;
    sc += v;
    ss += v * v;
  }
  const double dn = static_cast<double>(len), shift = static_cast<double>(sc) / dn;
  return {dn, static_cast<double>(mu) + shift, static_cast<double>(ss) - shift * shift * dn};
}

}  // namespace

template <typename T>
void group_norm_fwd(const GroupNormShape& s, const T* x, const T* weight, const T* bias, T* y, T* mean,
                    T* rstd, double eps) {
  const int64_t per_group = s.c / s.groups, len = s.spatial;
  const double count = static_cast<double>(per_group * len);
  parallel_for(0, s.n * s.groups, grain(per_group * len), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = r % s.groups * per_group;  // the group's first channel
      const T* xg = x + r * per_group * len;
      T* yg = y + r * per_group * len;
      // One pass over the group from memory: each block of kBlock values is summed, then its
      // centred squares summed while it is still in L1, and the blocks merged (Chan, Golub &
      // LeVeque), so the variance never takes E[x^2] - mean^2.
      Moments all;
      for (int64_t k = 0; k < per_group; ++k)
        for (int64_t b = 0; b < len; b += kBlock)
          all.merge(block_moments(xg + k * len + b, std::min(kBlock, len - b)));
      const double m = all.mean, rs = 1.0 / std::sqrt(std::max(all.m2 / count, 0.0) + eps);
      mean[r] = static_cast<T>(m);
      rstd[r] = static_cast<T>(rs);
      const T centre = static_cast<T>(m);
      for (int64_t k = 0; k < per_group; ++k) {
        // Centred before scaling: x * scale + (bias - mean * scale) would cancel when |mean| >> std.
        const double w = weight != nullptr ? static_cast<double>(weight[first + k]) : 1.0;
        const T scale = static_cast<T>(rs * w);
        const T offset = bias != nullptr ? bias[first + k] : T(0);
        const T* p = xg + k * len;
        T* q = yg + k * len;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) q[i] = (p[i] - centre) * scale + offset;
      }
    }
  });
}

template <typename T>
void group_norm_bwd(const GroupNormShape& s, const T* dy, const T* x, const T* weight, const T* mean,
                    const T* rstd, T* dx, T* dweight, T* dbias) {
  const int64_t per_group = s.c / s.groups, len = s.spatial, planes = s.n * s.c;
  // Per (image, channel): sum of dy and of dy * (x - mean).
  std::vector<double> sum_dy(static_cast<size_t>(planes)), sum_dyx(static_cast<size_t>(planes));
  parallel_for(0, planes, grain(len), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T mu = mean[p / per_group];
      const T* g = dy + p * len;
      const T* xp = x + p * len;
      T a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
      for (int64_t i = 0; i < len; ++i) {
        a += g[i];
        b += g[i] * (xp[i] - mu);
      }
      sum_dy[static_cast<size_t>(p)] = static_cast<double>(a);
      sum_dyx[static_cast<size_t>(p)] = static_cast<double>(b);
    }
  });
  for (int64_t ch = 0; ch < s.c; ++ch) {
    double dw = 0, db = 0;
    for (int64_t b = 0; b < s.n; ++b) {
      const auto p = static_cast<size_t>(b * s.c + ch);
      dw += sum_dyx[p] * static_cast<double>(rstd[(b * s.c + ch) / per_group]);
      db += sum_dy[p];
    }
    if (dweight != nullptr) dweight[ch] = static_cast<T>(dw);
    if (dbias != nullptr) dbias[ch] = static_cast<T>(db);
  }
  if (dx == nullptr) return;
  const double count = static_cast<double>(per_group * len);
  parallel_for(0, s.n * s.groups, grain(per_group * len), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = r % s.groups * per_group;
      const double rs = static_cast<double>(rstd[r]);
      double mean_gw = 0, mean_gwx = 0;
      for (int64_t k = 0; k < per_group; ++k) {
        const double w = weight != nullptr ? static_cast<double>(weight[first + k]) : 1.0;
        mean_gw += w * sum_dy[static_cast<size_t>(r * per_group + k)];
        mean_gwx += w * sum_dyx[static_cast<size_t>(r * per_group + k)] * rs;
      }
      mean_gw /= count;
      mean_gwx /= count;
      // dx = a * dy + bx * (x - mean) + c0 per channel, with a = rs * w, bx = -rs^2 * mean_gwx
      // and c0 = -rs * mean_gw.
      const T mu = mean[r];
      const T bx = static_cast<T>(-rs * rs * mean_gwx);
      const T c0 = static_cast<T>(-rs * mean_gw);
      for (int64_t k = 0; k < per_group; ++k) {
        const int64_t p = r * per_group + k;
        const T a = static_cast<T>(rs * (weight != nullptr ? static_cast<double>(weight[first + k]) : 1.0));
        const T* g = dy + p * len;
        const T* xp = x + p * len;
        T* out = dx + p * len;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) out[i] = a * g[i] + bx * (xp[i] - mu) + c0;
      }
    }
  });
}

#define TITAN_GROUP_NORM(T)                                                                                 \
  template void group_norm_fwd<T>(const GroupNormShape&, const T*, const T*, const T*, T*, T*, T*, double); \
  template void group_norm_bwd<T>(const GroupNormShape&, const T*, const T*, const T*, const T*, const T*,  \
                                  T*, T*, T*);
TITAN_GROUP_NORM(float)
TITAN_GROUP_NORM(double)
#undef TITAN_GROUP_NORM

}  // namespace titan::kernels::cpu
