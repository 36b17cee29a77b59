#pragma once
// The argument checks every attention path shares: q [B, S, Hq, D], k and v [B, S, Hkv, D], Hq a
// multiple of Hkv, one floating dtype, a finite scale. Errors name `op` and the three shapes.
#include <cmath>
#include <optional>
#include <utility>

#include "titan/ops/checks.h"

namespace titan::attention {

inline void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::optional<double>& scale) {
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    // A lazy tensor (graph mode) has no CPU data to check; the ops lower it instead.
    if (!t->defined() || !t->is_lazy()) {
      ops::check_float(op, name, *t);
      continue;
    }
    TITAN_CHECK(t->dtype() == kF32 || t->dtype() == kF64, op, ": ", name, " must be f32 or f64, got ",
                t->desc());
  }
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(1) == k.size(1) && q.size(3) == k.size(3) && q.size(3) > 0,
              op, ": expected q [B, S, Hq, D] and k, v [B, S, Hkv, D] with the same B, S and D > 0, got q ",
              q.desc(), ", k ", k.desc(), ", v ", v.desc());
  TITAN_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, op, ": query heads (", q.size(2),
              ") must be a multiple of key/value heads (", k.size(2), "); q ", q.desc(), ", k ", k.desc());
  TITAN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
              q.desc(), ", ", k.desc(), ", ", v.desc(), "; cast with .to()");
  TITAN_CHECK(!scale || std::isfinite(*scale), op, ": scale must be finite, got ", scale.value_or(0.0));
}

}  // namespace titan::attention
