#pragma once
// Rotary position embedding on a contiguous [batch, seq, heads, head_dim] tensor. Pair i of a head's
// first rotary_dim dims rotates by the angle of (position, frequency i), read from f32 tables
// cos/sin [max_seq, rotary_dim / 2] (which may hold an attention factor: cos^2 + sin^2 != 1); the
// dims past rotary_dim are copied. Token t of the sequence sits at position start_pos + t. f64
// inputs use the f32 tables widened to f64: the forward is then a fixed linear map whose transpose
// is exactly the sin-negated map, so f64 gradients are exact (gradcheck) without a second, f64
// table.
#include <cstdint>

namespace titan::kernels::cpu {

struct RopeGeometry {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;
  int64_t start_pos = 0;
};

// interleaved: pairs (2i, 2i + 1); otherwise pairs (i, i + rotary_dim / 2) (rotate_half).
// transpose: the forward's transpose (sin negated), which is the backward.
template <typename T>
void rope(const T* x, T* y, const float* cos, const float* sin, const RopeGeometry& g, bool interleaved,
          bool transpose);

}  // namespace titan::kernels::cpu
