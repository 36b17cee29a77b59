#include "titan/train/flux/schedule.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/train/flux/rectified_flow.h"

namespace titan::train::flux {

double schedule_mu(int64_t image_seq_len, const ScheduleShift& shift) {
  TITAN_CHECK(shift.max_seq_len != shift.base_seq_len, "FLUX schedule: max_image_seq_len and base_image_seq_len ",
              "are both ", shift.base_seq_len, "; they must differ to define the shift's line");
  const double m =
      (shift.max_shift - shift.base_shift) / static_cast<double>(shift.max_seq_len - shift.base_seq_len);
  const double b = shift.base_shift - m * static_cast<double>(shift.base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

std::vector<double> flux_sigmas(int64_t steps, int64_t image_seq_len, const ScheduleShift& shift) {
  TITAN_CHECK(steps >= 1, "FLUX schedule: the number of steps must be at least 1, got ", steps);
  TITAN_CHECK(image_seq_len >= 1, "FLUX schedule: the image must have at least one token, got ", image_seq_len);
  const double mu = schedule_mu(image_seq_len, shift);
  std::vector<double> sigmas;
  sigmas.reserve(static_cast<size_t>(steps + 1));
  // numpy's linspace(1, 1 / n, n): start + i * (stop - start) / (n - 1), the last exactly 1 / n.
  for (int64_t i = 0; i < steps; ++i) {
    const double t = steps == 1 ? 1.0
                     : i == steps - 1
                         ? 1.0 / static_cast<double>(steps)
                         : 1.0 + static_cast<double>(i) * (1.0 / static_cast<double>(steps) - 1.0) /
                                     static_cast<double>(steps - 1);
    sigmas.push_back(time_shift(t, std::exp(mu)));
  }
  sigmas.push_back(0.0);
  return sigmas;
}

}  // namespace titan::train::flux
