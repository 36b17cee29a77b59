#pragma once
// One fused AdamW update over a flat parameter: reads p, g, m, v once and writes p, m, v once.
#include <cstdint>

namespace titan::kernels::cpu {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based step number, for bias correction
  // The gradient is read as g * grad_scale, rounded to T (gradient clipping folded into the
  // update, as clip_grad_norm_'s g *= coef would round it); 1 reads it as it is.
  double grad_scale = 1.0;
};

// The update's per-step scalars, in double; the kernel rounds them to T once. Graph mode feeds the
// same numbers to its compiled update, so that both follow one formula.
struct AdamWScalars {
  double decay = 1.0;          // 1 - lr * weight_decay
  double neg_step_size = 0.0;  // -lr / (1 - beta1^t)
  double bc2_sqrt = 1.0;       // sqrt(1 - beta2^t)
};
AdamWScalars adamw_scalars(const AdamWHyper& h);

// Decoupled weight decay (Loshchilov & Hutter), matching torch.optim.AdamW:
//   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
template <typename T>
void adamw_step(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& h);
// The same update with the per-step scalars given (graph mode computes them in its program, and
// calls this as a custom call); h's lr, weight_decay and step are not read.
template <typename T>
void adamw_apply(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& h, const AdamWScalars& s);

}  // namespace titan::kernels::cpu
