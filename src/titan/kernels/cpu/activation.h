#pragma once
// Pointwise activations over contiguous buffers of n elements (f32 and f64). Backward kernels
// recompute what they need from the forward input rather than reading saved intermediates, so
// each is one read-compute-write pass.
#include <cstdint>

namespace titan::kernels::cpu {

enum class Activation {
  sigmoid,
  silu,       // x * sigmoid(x)
  gelu,       // x * Phi(x), Phi the standard normal CDF (the exact erf form)
  gelu_tanh,  // x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  tanh,
  quick_gelu,  // x * sigmoid(1.702 x): OpenAI CLIP's approximation of gelu
};

template <typename T>
void activation_fwd(Activation act, const T* x, T* y, int64_t n);
// dx = dy * act'(x). Sigmoid too recomputes from x rather than using y * (1 - y), which cancels to
// 0 in f32 once y rounds to 1 (x > ~17) although the true gradient is still e^-x.
template <typename T>
void activation_bwd(Activation act, const T* x, const T* dy, T* dx, int64_t n);

// y = cap * tanh(x / cap), Gemma 2's soft-cap of the final logits, in one pass instead of three
// (scale, tanh, scale). Within a few ulp of cap absolutely (vtanh), as splash's score soft-cap.
template <typename T>
void softcap_fwd(const T* x, T* y, int64_t n, T cap);
// dx = dy * (1 - tanh(x / cap)^2), from x as tanh's backward computes it.
template <typename T>
void softcap_bwd(const T* x, const T* dy, T* dx, int64_t n, T cap);

// out = silu(gate) * up.
template <typename T>
void swiglu_fwd(const T* gate, const T* up, T* out, int64_t n);
// d_gate = d_out * up * silu'(gate), d_up = d_out * silu(gate), in one pass.
template <typename T>
void swiglu_bwd(const T* gate, const T* up, const T* d_out, T* d_gate, T* d_up, int64_t n);

}  // namespace titan::kernels::cpu
