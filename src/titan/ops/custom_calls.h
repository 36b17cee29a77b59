#pragma once
// titan's CPU kernels as custom-call targets (graph/pjrt/ffi.h): a compiled program calls them in
// place of XLA's own lowering where titan's kernel is the faster or the reference one. Each call
// here emits the custom call on values of the current program; register_custom_calls must have
// been run on the plugin before such a program is compiled.
#include <vector>

#include "titan/graph/ir/program.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::ops {

// Registers every target below with `plugin` (idempotent; its FFI extension is required).
void register_custom_calls(const graph::pjrt::Plugin& plugin);

// rms_norm's forward through kernels::cpu::rms_norm_fwd: x [..., d] and weight [d] of one float
// dtype (f32 or f64) give {y [..., d], rstd [rows]}, rows the product of x's leading dims.
std::vector<graph::Value> rms_norm_fwd_call(const graph::Value& x, const graph::Value& weight, double eps);
// Its backward through kernels::cpu::rms_norm_bwd: dy and x [..., d], weight [d] and rstd [rows]
// give {dx [..., d], dweight [d]}.
std::vector<graph::Value> rms_norm_bwd_call(const graph::Value& dy, const graph::Value& x, const graph::Value& weight,
                                            const graph::Value& rstd);

// layer_norm's forward through kernels::cpu::layer_norm_fwd: x [..., d] and its optional weight
// and bias [d] (nullptr: none) of one float dtype give {y [..., d], mean [rows], rstd [rows]}.
std::vector<graph::Value> layer_norm_fwd_call(const graph::Value& x, const graph::Value* weight,
                                              const graph::Value* bias, double eps);
// Its backward through kernels::cpu::layer_norm_bwd: dy and x [..., d], the weight if any and the
// forward's mean and rstd give {dx, dweight (with a weight), dbias (with a bias)}.
std::vector<graph::Value> layer_norm_bwd_call(const graph::Value& dy, const graph::Value& x,
                                              const graph::Value* weight, bool has_bias,
                                              const graph::Value& mean, const graph::Value& rstd);

// One product op(a) @ op(b): a [m, k] (or [k, m], trans_a) and b [k, n] (or [n, k], trans_b).
struct GemmOperands {
  graph::Value a, b;
  bool trans_a = false, trans_b = false;
};
// Independent products of one dtype (f32, f64 or bf16), each [m, n] in the accumulation dtype
// (f32 for bf16 operands), as one call of kernels::cpu::gemm_concurrent: a linear layer's
// forward product, or its input and weight gradients side by side as eager runs them.
std::vector<graph::Value> gemm_call(const std::vector<GemmOperands>& products);

// kernels::cpu::grouped_gemm over groups whose sizes are data of the program: x [rows, k] and w
// [groups, n, k] (trans_w) or [groups, k, n] of one dtype (f32, f64 or bf16) and sizes [groups] i64
// summing to rows give y [rows, n], in the kernel's accumulation dtype (f32 for bf16 operands).
graph::Value grouped_gemm_call(const graph::Value& x, const graph::Value& w, const graph::Value& sizes,
                               bool trans_w);
// kernels::cpu::grouped_gemm_tn, the weight gradient: a [rows, m] and b [rows, n] of one dtype
// and sizes [groups] i64 give dw [groups, m, n] (group g: a_g^T @ b_g), in the accumulation dtype.
graph::Value grouped_gemm_tn_call(const graph::Value& a, const graph::Value& b, const graph::Value& sizes);

// SwiGLU's fused kernels (kernels/cpu/activation.h): gate and up of one shape and float dtype give
// silu(gate) * up; with the output's gradient, {d_gate, d_up}.
graph::Value swiglu_fwd_call(const graph::Value& gate, const graph::Value& up);
std::vector<graph::Value> swiglu_bwd_call(const graph::Value& gate, const graph::Value& up, const graph::Value& d_out);

// The row moves of a mixture-of-experts layer (kernels/cpu/moe.h), where XLA's gathers run at a
// quarter of their speed: gather_rows (src [n, d] and index [rows] i64 -> [rows, d]),
// combine_rows (src [tokens * k, d], row_of [tokens * k] i64 and optional weights [tokens, k] ->
// [tokens, d]) and its backward with weights (d_dst [tokens, d], src, row_of, weights -> {d_src,
// d_weights}). Float dtypes (f32, f64); every index is checked against its range.
graph::Value gather_rows_call(const graph::Value& src, const graph::Value& index);
graph::Value combine_rows_call(const graph::Value& src, const graph::Value& row_of, const graph::Value* weights,
                               int64_t tokens);
std::vector<graph::Value> combine_rows_bwd_call(const graph::Value& d_dst, const graph::Value& src,
                                                const graph::Value& row_of, const graph::Value& weights);

// kernels::cpu::grouped_swiglu_fwd: x [rows, in], w1 and w3 [groups, hidden, in] of one dtype and
// sizes [groups] i64 give {h, gate, up}, each [rows, hidden] in the accumulation dtype.
std::vector<graph::Value> grouped_swiglu_fwd_call(const graph::Value& x, const graph::Value& w1,
                                                  const graph::Value& w3, const graph::Value& sizes);
// kernels::cpu::grouped_swiglu_bwd: dh and the forward's gate and up, x, w1, w3 and sizes give
// {dx, dw1, dw3} in the accumulation dtype.
std::vector<graph::Value> grouped_swiglu_bwd_call(const graph::Value& dh, const graph::Value& gate,
                                                  const graph::Value& up, const graph::Value& x, const graph::Value& w1,
                                                  const graph::Value& w3, const graph::Value& sizes);

// kernels::cpu::adamw_apply, AdamW's fused update: param, grad, exp_avg and exp_avg_sq of one
// float dtype (f32, f64) and the step's scalars {decay, neg_step_size, bc2_sqrt, grad_scale} (f32
// or f64) give {param, exp_avg, exp_avg_sq}, each updated in its operand's buffer.
std::vector<graph::Value> adamw_call(const graph::Value& param, const graph::Value& grad, const graph::Value& exp_avg,
                                     const graph::Value& exp_avg_sq, const std::vector<graph::Value>& scalars,
                                     double beta1, double beta2, double eps);

}  // namespace titan::ops
