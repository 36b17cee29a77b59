#include "titan/train/flux/sampler.h"

#include "titan/core/error.h"
#include "titan/ops/arith.h"

namespace titan::train::flux {

Tensor euler_sample(const Tensor& noise, std::span<const double> sigmas, const VelocityFn& velocity,
                    const TextConditioning& positive, const TextConditioning* negative, double cfg_scale) {
  TITAN_CHECK(sigmas.size() >= 2, "FLUX sampling: the schedule needs at least 2 sigmas (one step), got ",
              sigmas.size());
  Tensor x = noise;
  for (size_t i = 0; i + 1 < sigmas.size(); ++i) {
    Tensor v = velocity(x, sigmas[i], positive);
    if (negative) {
      const Tensor v_neg = velocity(x, sigmas[i], *negative);
      v = v_neg + (v - v_neg) * cfg_scale;
    }
    x = x + v * (sigmas[i + 1] - sigmas[i]);
  }
  return x;
}

}  // namespace titan::train::flux
