#pragma once
// Rotary position embeddings. The table holds cos/sin of position * inv_freq for every position
// up to max_seq and every frequency (rope_frequencies.h: Hugging Face's scaling rules), computed
// once in f64 and stored f32.
#include <optional>

#include "titan/core/tensor.h"
#include "titan/ops/rope_frequencies.h"

namespace titan::ops {

// Which pairs of a head's first r (rotary_dim) dims rotate together.
//   rotate_half:  (i, i + r/2)  — Hugging Face / Qwen / TorchTitan-HF layout
//   interleaved:  (2i, 2i + 1)  — Meta's reference Llama layout (complex multiply)
enum class RopeLayout { rotate_half, interleaved };

struct RopeTable {
  // f32 [max_seq, rotary_dim / 2]: cos and sin of position * inv_freq, times the attention factor
  // (YaRN's, LongRoPE's), so that cos^2 + sin^2 need not be 1.
  Tensor cos;
  Tensor sin;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // the leading dims of each head that rotate; the rest pass through
  static RopeTable build(const RopeSpec& spec, int64_t max_seq);
  // Every dim rotating, with Llama 3.1's scaling or none.
  static RopeTable build(int64_t head_dim, int64_t max_seq, double theta,
                         std::optional<RopeScaling> scaling = std::nullopt);
};

// x [batch, seq, heads, head_dim] (f32 or f64); token t uses position start_pos + t; the dims past
// the table's rotary_dim are copied. Backward is the forward's transpose (the rotation by minus
// the angle, times the attention factor). Fused kernel, forward and backward.
Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, int64_t start_pos = 0);
// The same with the start position held by a 0-d i64 tensor: read on the host, or, as a value of
// the program being captured (graph mode's decoding step, where the position is an input), used
// there, so that one program serves every position. The program cannot check that value: positions
// past the table's end are clamped to it, so its caller must keep start + seq within max_seq.
Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, const Tensor& start);

}  // namespace titan::ops
