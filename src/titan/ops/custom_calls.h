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

}  // namespace titan::ops
