#include "titan/train/flux/schedule.h"

#include <cmath>
#include <fstream>

#include "titan/core/error.h"
#include "titan/core/json_fields.h"
#include "titan/train/flux/rectified_flow.h"

namespace titan::train::flux {

double schedule_mu(int64_t image_seq_len, const FlowSchedule& schedule) {
  TITAN_CHECK(schedule.max_seq_len != schedule.base_seq_len, "FLUX schedule: max_image_seq_len and ",
              "base_image_seq_len are both ", schedule.base_seq_len, "; they must differ to define the shift's line");
  const double m = (schedule.max_shift - schedule.base_shift) /
                   static_cast<double>(schedule.max_seq_len - schedule.base_seq_len);
  const double b = schedule.base_shift - m * static_cast<double>(schedule.base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

std::vector<double> flux_sigmas(int64_t steps, int64_t image_seq_len, const FlowSchedule& schedule) {
  TITAN_CHECK(steps >= 1, "FLUX schedule: the number of steps must be at least 1, got ", steps);
  TITAN_CHECK(image_seq_len >= 1, "FLUX schedule: the image must have at least one token, got ", image_seq_len);
  double shift = schedule.shift;
  if (schedule.dynamic_shifting) {
    const double mu = schedule_mu(image_seq_len, schedule);
    shift = schedule.exponential ? std::exp(mu) : mu;
  }
  TITAN_CHECK(shift > 0, "FLUX schedule: the shift must be positive, got ", shift,
              (schedule.dynamic_shifting ? " (the linear shift's mu at this image length)" : ""));
  std::vector<double> sigmas;
  sigmas.reserve(static_cast<size_t>(steps + 1));
  // numpy's linspace(1, 1 / n, n): start + i * (stop - start) / (n - 1), the last exactly 1 / n.
  for (int64_t i = 0; i < steps; ++i) {
    const double t = steps == 1 ? 1.0
                     : i == steps - 1
                         ? 1.0 / static_cast<double>(steps)
                         : 1.0 + static_cast<double>(i) * (1.0 / static_cast<double>(steps) - 1.0) /
                                     static_cast<double>(steps - 1);
    sigmas.push_back(time_shift(t, shift));
  }
  sigmas.push_back(0.0);
  return sigmas;
}

FlowSchedule flow_schedule_from_config(const nlohmann::json& config, const std::string& where) {
  namespace jf = json_fields;
  const jf::JsonPath at{where, ""};
  jf::object(config, at);
  const std::string cls = jf::field_or<std::string>(config, "_class_name", "FlowMatchEulerDiscreteScheduler", at);
  TITAN_CHECK(cls == "FlowMatchEulerDiscreteScheduler", where, ": _class_name is ", cls,
              "; titan samples FLUX with FlowMatchEulerDiscreteScheduler's Euler steps only");
  const int64_t train_steps = jf::field_or<int64_t>(config, "num_train_timesteps", 1000, at);
  TITAN_CHECK(train_steps == 1000, where, ": num_train_timesteps is ", train_steps,
              "; FluxPipeline divides the timesteps by 1000, so only 1000 gives the model its sigma");
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                          "stochastic_sampling"})
    TITAN_CHECK(!jf::field_or<bool>(config, key, false, at), where, ": ", key,
                " is true; titan's FLUX sampler does not implement it (set it false, or leave it out)");
  TITAN_CHECK(jf::optional_member(config, "shift_terminal", at).is_null(), where,
              ": shift_terminal is set; titan's FLUX sampler does not stretch the schedule (leave it null)");
  FlowSchedule s;
  s.dynamic_shifting = jf::field_or<bool>(config, "use_dynamic_shifting", false, at);
  const std::string type = jf::field_or<std::string>(config, "time_shift_type", "exponential", at);
  TITAN_CHECK(type == "exponential" || type == "linear", where, ": time_shift_type must be exponential or linear, got ",
              type);
  s.exponential = type == "exponential";
  s.shift = jf::field_or<double>(config, "shift", 1.0, at);
  s.base_seq_len = jf::field_or<int64_t>(config, "base_image_seq_len", 256, at);
  s.max_seq_len = jf::field_or<int64_t>(config, "max_image_seq_len", 4096, at);
  s.base_shift = jf::field_or<double>(config, "base_shift", 0.5, at);
  s.max_shift = jf::field_or<double>(config, "max_shift", 1.15, at);
  return s;
}

FlowSchedule load_flow_schedule(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "scheduler_config.json";
  std::ifstream in(file);
  TITAN_CHECK(in.good(), "FLUX schedule: cannot read ", file.string(),
              "; expected diffusers' scheduler/ folder (scheduler_config.json)");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  TITAN_CHECK(!config.is_discarded(), file.string(), " is not valid JSON");
  return flow_schedule_from_config(config, file.string());
}

}  // namespace titan::train::flux
