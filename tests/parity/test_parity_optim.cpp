// titan vs PyTorch: AdamW over 20 training steps (torch.optim.AdamW), LR schedules through
// torch.optim.lr_scheduler.LambdaLR, and torch.nn.utils.clip_grad_norm_.
//
// Bounds (relative to the reference's max magnitude): f64 runs agree to ~1e-15 and are held to
// 1e-12. f32 runs reached 4e-7 .. 8e-7 over twelve reference draws and are held to 2e-6: the two
// libraries' GEMMs sum in different orders, and Adam's normalised update m / sqrt(v) passes
// those last-bit gradient differences on to the parameters, compounding over 20 steps.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "support/parity.h"
#include "support/test_util.h"
#include "titan/nn/linear.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/optim/adamw.h"
#include "titan/optim/clip.h"
#include "titan/optim/lr_scheduler.h"

namespace titan::test {
namespace {

// The model of cases_optim.py: y = fc2((fc1 x)^2).
struct TwoLayer : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  explicit TwoLayer(DType dtype) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 16, true, TensorOptions{.dtype = dtype}));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 4, false, TensorOptions{.dtype = dtype}));
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = (*fc1)(x);
    return (*fc2)(h * h);
  }
};

optim::LrSchedule schedule_of(const ParityCase& c) {
  static const std::map<std::string, optim::DecayType> kTypes = {{"linear", optim::DecayType::linear},
                                                                 {"cosine", optim::DecayType::cosine},
                                                                 {"sqrt", optim::DecayType::sqrt},
                                                                 {"constant", optim::DecayType::constant}};
  optim::LrSchedule s{.training_steps = static_cast<int64_t>(c.attr("training_steps")),
                      .warmup_steps = static_cast<int64_t>(c.attr("warmup_steps")),
                      .decay_type = kTypes.at(c.file.metadata.at("decay_type")),
                      .min_lr_factor = c.attr("min_lr_factor")};
  if (c.file.metadata.count("decay_ratio")) s.decay_ratio = c.attr("decay_ratio");
  return s;
}

void check_training_run(const std::string& name, double tol) {
  ParityCase c = load_parity_case(name);
  const Tensor& xs = c["in.x"];
  const Tensor& ts = c["in.t"];
  TwoLayer model(xs.dtype());
  c.load_initial_weights(model);

  optim::AdamW opt(model.named_parameters(), c.adamw_options());
  std::optional<optim::LrScheduler> sched;
  if (c.file.metadata.count("warmup_steps")) sched.emplace(opt, schedule_of(c));
  bool clip = c.file.metadata.count("max_norm") > 0;

  int64_t steps = static_cast<int64_t>(c.attr("steps"));
  std::vector<double> losses, lrs, norms;
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor x = xs.narrow(0, s, 1).squeeze(0), t = ts.narrow(0, s, 1).squeeze(0);
    Tensor loss = ops::mean(ops::square(model(x) - t));
    loss.backward();
    if (clip) norms.push_back(optim::clip_grad_norm_(model.parameters(), c.attr("max_norm")));
    lrs.push_back(opt.lr());
    opt.step();
    if (sched) sched->step();
    losses.push_back(loss.item());
  }
  EXPECT_TRUE(tensors_close(Tensor::from_vector(losses, {steps}), c["out.loss"], tol, name + " losses"));
  EXPECT_TRUE(tensors_close(Tensor::from_vector(lrs, {steps}), c["out.lr"], 1e-12, name + " lr"));
  if (clip) {
    EXPECT_TRUE(
        tensors_close(Tensor::from_vector(norms, {steps}), c["out.grad_norm"], tol, name + " grad norms"));
  }
  for (auto& [key, p] : model.named_parameters()) {
    EXPECT_TRUE(tensors_close(p, c["out." + key], tol, name + " " + key));
    EXPECT_TRUE(
        tensors_close(opt.state(key).exp_avg, c["out." + key + ".exp_avg"], tol, name + " " + key + " m"));
    EXPECT_TRUE(tensors_close(opt.state(key).exp_avg_sq, c["out." + key + ".exp_avg_sq"], tol,
                              name + " " + key + " v"));
    EXPECT_EQ(opt.state(key).step, steps);
  }
}

TEST(ParityOptim, AdamWTrainingRun) {
  check_training_run("adamw_f64", 1e-12);
  check_training_run("adamw_f32", 2e-6);
}

TEST(ParityOptim, AdamWWithScheduleAndClipping) {
  check_training_run("adamw_schedule_clip_f64", 1e-12);
}

TEST(ParityOptim, LrSchedulesMatchLambdaLR) {
  for (const char* name :
       {"lr_warmup_cosine", "lr_warmup_linear", "lr_wsd_sqrt", "lr_wsd_cosine", "lr_warmup_constant"}) {
    ParityCase c = load_parity_case(name);
    Tensor p = Tensor::zeros({1}).requires_grad_();
    optim::AdamW opt({{"p", p}}, {.lr = c.attr("lr")});
    optim::LrScheduler sched(opt, schedule_of(c));
    const Tensor& ref = c["out.lr"];
    std::vector<double> lrs;
    for (int64_t s = 0; s < ref.numel(); ++s, sched.step()) lrs.push_back(opt.lr());
    EXPECT_TRUE(tensors_close(Tensor::from_vector(lrs, {ref.numel()}), ref, 1e-12, name));
  }
}

TEST(ParityOptim, ClipGradNorm) {
  for (const char* name : {"clip_l2", "clip_inf", "clip_below_max"}) {
    ParityCase c = load_parity_case(name);
    std::vector<Tensor> params;
    for (int i = 0; i < static_cast<int>(c.attr("count")); ++i) {
      Tensor p = Tensor::zeros(c["in.g" + std::to_string(i)].sizes()).requires_grad_();
      p.set_grad(c["in.g" + std::to_string(i)].clone());
      params.push_back(p);
    }
    double total = optim::clip_grad_norm_(params, c.attr("max_norm"), c.attr("norm_type"));
    EXPECT_NEAR(total, c["out.total_norm"].item(), 1e-6 * total) << name;
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(tensors_close(params[i].grad(), c["out.g" + std::to_string(i)], 1e-6, name));
  }
}

}  // namespace
}  // namespace titan::test
