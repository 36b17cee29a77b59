#pragma once
// The plain attention path: softmax(scores(q k^T) + mask) v (scores.h) with every (batch,
// head)'s [S, S] probability matrix materialised and kept for backward. It trains until splash
// attention (block-sparse, never materialising scores) lands, and stays as the reference splash is
// checked against.
#include <optional>

#include "titan/core/tensor.h"

namespace titan::attention {

struct AttentionOptions {
  bool causal = true;                            // query i sees keys 0..i
  std::optional<double> scale = std::nullopt;    // multiplies q k^T; unset: 1 / sqrt(head_dim)
  std::optional<double> softcap = std::nullopt;  // scores -> softcap * tanh(scores / softcap); unset: none
};

// q [B, S, Hq, D], k and v [B, S, Hkv, D] (f32 or f64, one dtype) -> [B, S, Hq, D], contiguous.
// Hq must be a multiple of Hkv: query head h reads kv head h / (Hq / Hkv) (grouped-query
// attention; Hkv = 1 is multi-query). The GEMMs address each kv head in place, so K and V are
// never repeated in memory. Forward and backward are fused per (batch, head) and walk the query
// rows in blocks, skipping the key blocks a causal mask hides entirely.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& opts = {});

}  // namespace titan::attention
