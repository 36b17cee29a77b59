#include "titan/kernels/cpu/adamw.h"

#include <cmath>

#include "titan/core/parallel.h"

namespace titan::kernels::cpu {

AdamWScalars adamw_scalars(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  return {.decay = 1.0 - h.lr * h.weight_decay,
          .neg_step_size = -h.lr / (1.0 - std::pow(h.beta1, t)),
          .bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t))};
}

template <typename T>
void adamw_step(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& h) {
  adamw_apply(p, g, m, v, n, h, adamw_scalars(h));
}

template <typename T>
void adamw_apply(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& h, const AdamWScalars& s) {
  // Scalars in double, then rounded to T once, as torch.optim.AdamW's Python floats are when
  // they meet a tensor of dtype T. The arithmetic below follows its order of operations, so an
  // f64 run agrees with it to rounding and an f32 run to a few ulp per step.
  const T decay = static_cast<T>(s.decay);
  const T b1 = static_cast<T>(h.beta1), one_minus_b1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), one_minus_b2 = static_cast<T>(1.0 - h.beta2);
  const T neg_step_size = static_cast<T>(s.neg_step_size);
  const T bc2_sqrt = static_cast<T>(s.bc2_sqrt);
  const T eps = static_cast<T>(h.eps);
  const T grad_scale = static_cast<T>(h.grad_scale);
  // Eight bytes of traffic per element and ~15 flops: memory bound, so chunks are large enough
  // to amortise the fork and small enough to spread a mid-sized tensor over the cores.
  parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      T gi = g[i] * grad_scale;
      T mi = m[i] * b1 + one_minus_b1 * gi;
      T vi = v[i] * b2 + one_minus_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      T denom = std::sqrt(vi) / bc2_sqrt + eps;
      p[i] = p[i] * decay + neg_step_size * (mi / denom);
    }
  });
}

template void adamw_step<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&);
template void adamw_step<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&);
template void adamw_apply<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&,
                                 const AdamWScalars&);
template void adamw_apply<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&,
                                  const AdamWScalars&);

}  // namespace titan::kernels::cpu
