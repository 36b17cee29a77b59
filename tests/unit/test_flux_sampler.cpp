// FLUX's sampling schedule against diffusers' FlowMatchEulerDiscreteScheduler as FluxPipeline sets
// it up (tests/parity/flux_schedule_reference.py), and the Euler and guidance arithmetic on toy
// velocities whose exact answers are known.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "support/paths.h"
#include "support/test_util.h"
#include "titan/ops/arith.h"
#include "titan/train/flux/sampler.h"
#include "titan/train/flux/schedule.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// The script's output, made when missing or older than the script; empty when it cannot run.
nlohmann::json schedule_reference() {
  const fs::path out = fs::path(TITAN_PARITY_DIR) / "flux_schedule.json";
  const fs::path script = fs::path(TITAN_SOURCE_DIR) / "tests" / "parity" / "flux_schedule_reference.py";
  if (!fs::exists(out) || fs::last_write_time(out) < fs::last_write_time(script)) {
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + script.string() + "' --out '" + out.string() +
                            "' > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return {};
  }
  return nlohmann::json::parse(test::slurp(out));
}

TEST(FluxSchedule, MatchesDiffusersFlowMatchEulerScheduler) {
  const nlohmann::json cases = schedule_reference();
  if (cases.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_schedule_reference.py did not run (make deps-test)");
  ASSERT_GE(cases.size(), 13u);
  int unshifted = 0;
  for (const nlohmann::json& c : cases) {
    const int64_t steps = c["steps"], seq_len = c["image_seq_len"];
    SCOPED_TRACE("steps " + std::to_string(steps) + ", " + std::to_string(seq_len) + " tokens, " + c["config"].dump());
    const FlowSchedule schedule = flow_schedule_from_config(c["config"], "scheduler_config.json");
    EXPECT_NEAR(schedule_mu(seq_len, schedule), c["mu"].get<double>(), 1e-12);
    const std::vector<double> sigmas = flux_sigmas(steps, seq_len, schedule);
    unshifted += !schedule.dynamic_shifting && schedule.shift == 1.0;
    const std::vector<double> want = c["sigmas"], timesteps = c["timesteps"];
    ASSERT_EQ(sigmas.size(), want.size());
    ASSERT_EQ(timesteps.size(), want.size() - 1);
    // diffusers shifts float32 sigmas: its values carry float32 rounding, ours are float64.
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(sigmas[i], want[i], 2e-7) << "sigma " << i;
    // Its timesteps are float32 products of those: 1000 x 2e-7 and a float32 rounding at ~1000.
    for (size_t i = 0; i < timesteps.size(); ++i)
      EXPECT_NEAR(sigmas[i] * 1000, timesteps[i], 3e-4) << "the model's timestep at step " << i;
    EXPECT_EQ(sigmas.front(), 1.0);
    EXPECT_EQ(sigmas.back(), 0.0);
  }
  EXPECT_EQ(unshifted, 2) << "FLUX.1-schnell's config";
}

TEST(FluxSchedule, RefusesSchedulerSettingsItDoesNotImplement) {
  const nlohmann::json dev = {{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"use_dynamic_shifting", true},
                              {"shift", 3.0}, {"shift_terminal", nullptr}, {"use_karras_sigmas", false}};
  const FlowSchedule s = flow_schedule_from_config(dev, "dev.json");
  EXPECT_TRUE(s.dynamic_shifting);
  EXPECT_TRUE(s.exponential);
  EXPECT_EQ(s.max_seq_len, 4096);
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json c = dev;
    c[key] = value;
    return c;
  };
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("_class_name", "EulerDiscreteScheduler"), "a.json"), "a.json",
                     "EulerDiscreteScheduler");
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("shift_terminal", 0.02), "a.json"), "shift_terminal");
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("use_beta_sigmas", true), "a.json"), "use_beta_sigmas");
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("num_train_timesteps", 500), "a.json"), "num_train_timesteps",
                     "500");
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("time_shift_type", "cosine"), "a.json"), "time_shift_type",
                     "cosine");
  EXPECT_TITAN_ERROR(flow_schedule_from_config(with("shift", "3"), "a.json"), "a.json", "shift");
}

TEST(FluxSchedule, ShiftsFromTheBaseToTheMaxLength) {
  EXPECT_NEAR(schedule_mu(256), 0.5, 1e-15);
  EXPECT_NEAR(schedule_mu(4096), 1.15, 1e-15);
  // Larger images spend their steps at higher noise.
  const std::vector<double> small = flux_sigmas(10, 256), large = flux_sigmas(10, 4096);
  for (size_t i = 1; i + 1 < small.size(); ++i) {
    EXPECT_GT(large[i], small[i]);
    EXPECT_LT(small[i], small[i - 1]);
  }
  EXPECT_TITAN_ERROR(flux_sigmas(0, 256), "at least 1", "got 0");
}

TextConditioning text_of(double value) {
  return {.t5 = Tensor::full({2, 3, 4}, value), .clip_pooled = Tensor::full({2, 5}, value)};
}

TEST(FluxEuler, AStraightFlowLandsOnItsTargetExactly) {
  // The ideal velocity of x_t = (1 - t) x0 + t noise is (x_t - x0) / t: Euler steps follow the
  // straight line, so any schedule ends at x0.
  const Tensor x0 = test::rand_f32({2, 6, 8}, 1), noise = test::rand_f32({2, 6, 8}, 2);
  const std::vector<double> sigmas = flux_sigmas(7, 1024);
  int calls = 0;
  const VelocityFn velocity = [&](const Tensor& x, double sigma, const TextConditioning&) {
    EXPECT_DOUBLE_EQ(sigma, sigmas[static_cast<size_t>(calls++)]);
    return (x - x0) / sigma;
  };
  const Tensor out = euler_sample(noise, sigmas, velocity, text_of(0));
  EXPECT_EQ(calls, 7);
  EXPECT_TRUE(test::tensors_close(out, x0, 1e-5, "Euler's end point"));
}

TEST(FluxEuler, StepsBySigmaDifferences) {
  // A velocity of sigma itself: x = noise + sum_i (s_{i+1} - s_i) s_i, summed here in float64.
  const Tensor noise = test::rand_f32({1, 4, 3}, 3);
  const std::vector<double> sigmas = flux_sigmas(5, 300);
  double drift = 0;
  for (size_t i = 0; i + 1 < sigmas.size(); ++i) drift += (sigmas[i + 1] - sigmas[i]) * sigmas[i];
  const VelocityFn velocity = [](const Tensor& x, double sigma, const TextConditioning&) {
    return Tensor::full(x.sizes(), sigma);
  };
  EXPECT_TRUE(test::tensors_close(euler_sample(noise, sigmas, velocity, text_of(0)), noise + drift, 1e-6));
}

TEST(FluxEuler, ClassifierFreeGuidanceMixesTwoPasses) {
  // The velocity tells the prompts apart by their T5 value: the prompt's is 2, the negative's -1.
  const Tensor noise = test::rand_f32({2, 4, 3}, 4);
  const TextConditioning positive = text_of(2), negative = text_of(-1);
  int positive_calls = 0, negative_calls = 0;
  const VelocityFn velocity = [&](const Tensor& x, double sigma, const TextConditioning& text) {
    const double which = text.t5.to_vector<float>()[0];
    ++(which > 0 ? positive_calls : negative_calls);
    return Tensor::full(x.sizes(), which * 10 + sigma);
  };
  const std::vector<double> sigmas = {1.0, 0.25, 0.0};
  const double scale = 4.5;
  // v = neg + scale (pos - neg) with pos = 20 + sigma, neg = -10 + sigma: 125 + sigma.
  const double drift = (0.25 - 1.0) * (-10 + 1.0 + scale * 30) + (0.0 - 0.25) * (-10 + 0.25 + scale * 30);
  const Tensor guided = euler_sample(noise, sigmas, velocity, positive, &negative, scale);
  EXPECT_EQ(positive_calls, 2);
  EXPECT_EQ(negative_calls, 2);
  EXPECT_TRUE(test::tensors_close(guided, noise + drift, 1e-6, "guided"));
  // Without a negative: one pass per step, the prompt's velocity alone.
  positive_calls = negative_calls = 0;
  const Tensor plain = euler_sample(noise, sigmas, velocity, positive);
  EXPECT_EQ(positive_calls, 2);
  EXPECT_EQ(negative_calls, 0);
  EXPECT_TRUE(test::tensors_close(plain, noise + ((0.25 - 1.0) * 21.0 + (0.0 - 0.25) * 20.25), 1e-6, "unguided"));
}

}  // namespace
}  // namespace titan::train::flux
