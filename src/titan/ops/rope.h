#pragma once
// Rotary position embeddings. The table holds cos/sin of position * inv_freq for every position
// up to max_seq and every frequency, computed once in f64 and stored f32.
#include <optional>

#include "titan/core/tensor.h"

namespace titan::ops {

// Which pairs of a head's dims rotate together.
//   rotate_half:  (i, i + d/2)  — Hugging Face / Qwen / TorchTitan-HF layout
//   interleaved:  (2i, 2i + 1)  — Meta's reference Llama layout (complex multiply)
enum class RopeLayout { rotate_half, interleaved };

// Llama 3.1 frequency scaling ("rope_type": "llama3" in Hugging Face configs).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct RopeTable {
  Tensor cos;  // f32 [max_seq, head_dim / 2]
  Tensor sin;  // f32 [max_seq, head_dim / 2]
  int64_t head_dim = 0;
  static RopeTable build(int64_t head_dim, int64_t max_seq, double theta,
                         std::optional<RopeScaling> scaling = std::nullopt);
};

// x [batch, seq, heads, head_dim] (f32 or f64); token t uses position start_pos + t. Backward is
// the inverse rotation. Fused kernel, forward and backward.
Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, int64_t start_pos = 0);
// The same with the start position held by a 0-d i64 tensor: read on the host, or, as a value of
// the program being captured (graph mode's decoding step, where the position is an input), used
// there, so that one program serves every position. The program cannot check that value: positions
// past the table's end are clamped to it, so its caller must keep start + seq within max_seq.
Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, const Tensor& start);

}  // namespace titan::ops
