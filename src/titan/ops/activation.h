#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x)
Tensor tanh(const Tensor& x);
// cap * tanh(x / cap): Gemma 2's soft-capping of logits, one fused kernel each way (eager); within
// a few ulp of cap absolutely.
Tensor softcap(const Tensor& x, double cap);
enum class GeluApproximation { none, tanh };  // none: exact erf form (PyTorch's default)
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
// x * sigmoid(1.702 x): OpenAI CLIP's gelu (transformers' "quick_gelu"), one fused kernel each way.
Tensor quick_gelu(const Tensor& x);
// silu(gate) * up in one fused kernel (forward and backward): the SwiGLU feed-forward's core.
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace titan::ops
