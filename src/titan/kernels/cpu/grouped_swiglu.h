#pragma once
// The first half of every expert's SwiGLU feed-forward over rows grouped by expert (as
// grouped_gemm.h lays them out), forward and backward in one place: eager's grouped_swiglu op and
// graph mode's custom call of it run this code. x [rows, in]; w1 (gate) and w3 (up) [groups,
// hidden, in] in nn.Linear's layout; gate, up and h [rows, hidden] in the accumulation dtype
// (gemm_acc_t: float32 for bf16 operands).
#include <cstdint>

#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

// gate_g = x_g @ w1_g^T, up_g = x_g @ w3_g^T, h = silu(gate) * up.
template <typename T>
void grouped_swiglu_fwd(const int64_t* group_rows, int64_t groups, int64_t hidden, int64_t in, const T* x,
                        const T* w1, const T* w3, gemm_acc_t<T>* gate, gemm_acc_t<T>* up, gemm_acc_t<T>* h);

// From dh and the forward's gate and up: dx [rows, in] (the sum over both products), dw1 and dw3
// [groups, hidden, in], each skipped where null. The SwiGLU derivative is recomputed on each call:
// a split backward asks for dx, then for the weights, and rows x hidden elementwise work costs less
// than keeping two more [rows, hidden] buffers between the two. Under bf16 operands the gate and
// up gradients are rounded to bf16 for the products, as the forward's operands were.
template <typename T>
void grouped_swiglu_bwd(const int64_t* group_rows, int64_t groups, int64_t hidden, int64_t in,
                        const gemm_acc_t<T>* dh, const gemm_acc_t<T>* gate, const gemm_acc_t<T>* up, const T* x,
                        const T* w1, const T* w3, gemm_acc_t<T>* dx, gemm_acc_t<T>* dw1, gemm_acc_t<T>* dw3);

}  // namespace titan::kernels::cpu
