#include "titan/attention/scores.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/graph/ir/hlo.h"

namespace titan::attention {

Scores scores_for(const char* op, int64_t head_dim, const std::optional<double>& scale,
                  const std::optional<double>& softcap) {
  TITAN_CHECK(!scale || std::isfinite(*scale), op, ": scale must be finite, got ", scale.value_or(0.0));
  TITAN_CHECK(!softcap || (std::isfinite(*softcap) && *softcap > 0), op,
              ": softcap must be finite and > 0 (Gemma 2 uses 50), got ", softcap.value_or(0.0),
              "; leave it unset for scores without a cap");
  return {scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim))), softcap};
}

namespace hlo = graph::hlo;

graph::Value capped(const Scores& scores, const graph::Value& s) {
  if (!scores.softcap) return s;
  return hlo::mul(hlo::tanh(hlo::mul(s, 1.0 / *scores.softcap)), *scores.softcap);
}

graph::Value capped_grad(const Scores& scores, const graph::Value& capped_s, const graph::Value& ds) {
  if (!scores.softcap) return ds;
  // As cap_grad_factor: t clamped at -1, so that a masked pair's factor is 0, not -inf.
  const graph::Value t = hlo::max(hlo::mul(capped_s, 1.0 / *scores.softcap),
                                  hlo::constant(-1.0, capped_s.shape, capped_s.dtype));
  const graph::Value one = hlo::constant(1.0, t.shape, t.dtype);
  return hlo::mul(ds, hlo::sub(one, hlo::mul(t, t)));
}

}  // namespace titan::attention
