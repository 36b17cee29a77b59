#pragma once
// How every attention path (splash's tiles, the reference, decoding, and their graph-mode forms)
// turns q k^T into the scores its mask and softmax see: s = scale * q k^T and, with a cap (Gemma
// 2's attn_logit_softcapping), s' = cap * tanh(s / cap), which bounds each score to (-cap, cap).
// The mask comes after the cap, so a hidden pair stays -inf. Backward: ds = ds' * (1 - t^2) with
// t = s' / cap, read from the capped scores so that nothing more is kept.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "titan/graph/ir/program.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::attention {

struct Scores {
  double scale = 1.0;                            // multiplies q k^T
  std::optional<double> softcap = std::nullopt;  // cap; unset: scores are not capped
};

// The scores of attention over heads of `head_dim`: `scale` or 1 / sqrt(head_dim), and `softcap`
// checked (finite and > 0), errors naming `op`.
Scores scores_for(const char* op, int64_t head_dim, const std::optional<double>& scale,
                  const std::optional<double>& softcap);

// s[0, n) capped in place: cap * tanh(s / cap).
template <typename T>
void cap_scores(T* s, int64_t n, T cap) {
  const T inv = T(1) / cap;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] = cap * kernels::cpu::vtanh(s[j] * inv);
}

// The factor 1 - (s' / cap)^2 that turns the gradient of a capped score s' into that of the
// score before the cap. A masked score (-inf) gives 0 rather than NaN.
template <typename T>
T cap_grad_factor(T capped, T inv_cap) {
  const T t = std::max(T(-1), capped * inv_cap);
  return T(1) - t * t;
}

// Graph mode, on values of the program being captured (any shape; the scale is the caller's):
// scaled scores capped where `scores` has a cap, else as they are; and the gradient ds of the
// capped scores `capped_s` (masked pairs at -inf) turned into that of the scores before the cap.
graph::Value capped(const Scores& scores, const graph::Value& s);
graph::Value capped_grad(const Scores& scores, const graph::Value& capped_s, const graph::Value& ds);

}  // namespace titan::attention
