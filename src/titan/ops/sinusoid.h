#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

// [cos(t f); sin(t f)] per row: t [B] f32 or f64 (a CPU tensor or a value of the program being
// captured), freqs [half] of t's dtype on the host -> [B, 2 half] in t's dtype. Each product and
// each cos/sin rounds once in that dtype (torch's get_timestep_embedding). In a capture freqs enter
// the program as an input, as RoPE's table does, so that t stays a value: new timesteps each run
// reuse one compiled program. A constant: no gradient flows to t.
Tensor sinusoid(const Tensor& t, const Tensor& freqs);

}  // namespace titan::ops
