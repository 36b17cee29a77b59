#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "support/test_util.h"
#include "titan/autograd/grad_mode.h"
#include "titan/kernels/cpu/adamw.h"
#include "titan/optim/adamw.h"
#include "titan/optim/clip.h"
#include "titan/optim/lr_scheduler.h"

namespace titan {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using optim::DecayType;
using optim::lr_factor;
using optim::LrSchedule;

Tensor param(std::vector<double> values, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  return Tensor::from_vector<double>(values, shape).requires_grad_();
}

// Element 0 (item() wants a 0-dim tensor).
double first(const Tensor& t) {
  return t.to_vector<double>()[0];
}

void set_grad(const Tensor& p, std::vector<double> g) {
  p.set_grad(Tensor::from_vector<double>(g, p.sizes()).to(p.dtype()));
}

// ---- AdamW --------------------------------------------------------------------------------------

TEST(AdamW, MatchesTheFormulaStepByStep) {
  AdamWOptions o{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
  Tensor p = param({1.0});
  AdamW opt({{"p", p}}, o);
  double ref = 1.0, m = 0, v = 0;
  for (int t = 1; t <= 3; ++t) {
    double g = t == 2 ? -0.25 : 0.5;
    set_grad(p, {g});
    opt.step();
    ref *= 1 - o.lr * o.weight_decay;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    double mhat = m / (1 - std::pow(o.beta1, t)), vhat = v / (1 - std::pow(o.beta2, t));
    ref -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    EXPECT_NEAR(first(p), ref, 1e-15) << "step " << t;
    if (t == 1) {
      EXPECT_NEAR(first(p), 0.999 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);  // by hand
    }
  }
  EXPECT_EQ(opt.state("p").step, 3);
  EXPECT_NEAR(first(opt.state("p").exp_avg), m, 1e-15);
  EXPECT_NEAR(first(opt.state("p").exp_avg_sq), v, 1e-15);
}

TEST(AdamW, KernelAgreesWithAScalarDoubleReference) {
  // Sizes around the vector width and one large enough to run in parallel.
  kernels::cpu::AdamWHyper h{
      .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 4};
  for (int64_t n : {1, 7, 16, 17, 100003}) {
    std::vector<float> p = test::rand_f32({n}, 1).to_vector<float>(),
                       g = test::rand_f32({n}, 2).to_vector<float>();
    std::vector<float> m = test::rand_f32({n}, 3, -0.1, 0.1).to_vector<float>();
    std::vector<float> v = test::rand_f32({n}, 4, 0.0, 0.01).to_vector<float>();
    std::vector<double> ref(p.begin(), p.end());
    for (int64_t i = 0; i < n; ++i) {
      double mi = h.beta1 * m[i] + (1 - h.beta1) * g[i], vi = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
      ref[i] = ref[i] * (1 - h.lr * h.weight_decay) -
               h.lr / (1 - std::pow(h.beta1, 4)) * mi / (std::sqrt(vi / (1 - std::pow(h.beta2, 4))) + h.eps);
    }
    kernels::cpu::adamw_step<float>(p.data(), g.data(), m.data(), v.data(), n, h);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(p[i] - ref[i]));
    EXPECT_LT(worst, 1e-6) << "n = " << n;
  }
}

// Clipping folded into the update reads each gradient as g * coef rounded to the dtype, as
// clip_grad_norm_'s g *= coef would have left it, so both routes give the same bits.
TEST(AdamW, GradScaleEqualsStepOnScaledGradients) {
  const std::vector<double> g = {0.3, -1.7, 2.5e-3, 9.0, -4.25};
  const double max_norm = 1.0, total_norm = 2.6937;
  const double coef = optim::clip_coefficient(max_norm, total_norm);
  ASSERT_LT(coef, 1.0);
  for (DType dtype : {kF32, kF64}) {
    Tensor a = param({1, 2, 3, 4, 5}).detach().to(dtype).requires_grad_();
    Tensor b = a.detach().clone().requires_grad_();
    AdamW scaled_first({{"p", a}}, {.lr = 0.01, .weight_decay = 0.1});
    AdamW scaled_inside({{"p", b}}, {.lr = 0.01, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      set_grad(a, g);
      set_grad(b, g);
      optim::clip_grads_with_norm_({a}, max_norm, total_norm);
      scaled_first.step();
      scaled_inside.step(coef);
      EXPECT_EQ(b.grad().to_vector<double>(),
                Tensor::from_vector<double>(g, {5}).to(dtype).to_vector<double>())
          << "the gradient itself is left unscaled";
    }
    EXPECT_TRUE(test::same_bits(a, b)) << dtype_name(dtype);
    EXPECT_TRUE(test::same_bits(scaled_first.state("p").exp_avg_sq, scaled_inside.state("p").exp_avg_sq));
  }
  Tensor p = param({1});
  set_grad(p, {1});
  AdamW opt({{"p", p}});
  for (double bad : {0.0, -1.0, std::nan("")}) EXPECT_TITAN_ERROR(opt.step(bad), "grad_scale", "> 0");
}

TEST(AdamW, SkipsParametersWithoutGradient) {
  Tensor a = param({1, 2}), b = param({3});
  AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  set_grad(a, {1, 1});
  opt.step();
  EXPECT_EQ(opt.state("a").step, 1);
  EXPECT_EQ(opt.state("b").step, 0) << "b had no gradient, so it took no step (no decay either)";
  EXPECT_EQ(first(b), 3.0);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, NoDecayRule) {
  // Zero gradients leave only the decay: w shrinks by lr * wd, the 1-d b not at all.
  Tensor w = param({1, 1, 1, 1}, {2, 2}), b = param({1, 1});
  AdamW opt({{"w", w}, {"b", b}},
            {.lr = 0.1, .weight_decay = 0.5, .no_decay = [](const std::string&, const Tensor& p) {
               return p.dim() < 2;
             }});
  set_grad(w, {0, 0, 0, 0});
  set_grad(b, {0, 0});
  opt.step();
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(4, 0.95));
  EXPECT_EQ(b.to_vector<double>(), std::vector<double>(2, 1.0));
}

TEST(AdamW, StateDictRoundTrip) {
  Tensor a1 = param({0.5, -0.5, 2}), a2 = param({0.5, -0.5, 2});
  AdamW o1({{"layers.0.w", a1}}, {.lr = 0.05, .weight_decay = 0.1});
  AdamW o2({{"layers.0.w", a2}}, {.lr = 0.05, .weight_decay = 0.1});
  for (int t = 0; t < 3; ++t) {
    set_grad(a1, {0.1 * t, -0.3, 1.0});
    o1.step();
  }
  {
    autograd::NoGradGuard no_grad;
    a2.copy_(a1);
  }
  std::map<std::string, Tensor> sd = o1.state_dict();
  EXPECT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd.at("layers.0.w.step").item(), 3.0);
  o2.load_state_dict(sd);
  EXPECT_EQ(o2.state("layers.0.w").step, 3);
  set_grad(a1, {1, 2, 3});
  set_grad(a2, {1, 2, 3});
  o1.step();
  o2.step();
  EXPECT_EQ(a1.to_vector<double>(), a2.to_vector<double>());

  auto bad = sd;
  bad.erase("layers.0.w.exp_avg_sq");
  EXPECT_TITAN_ERROR(o2.load_state_dict(bad), "missing key 'layers.0.w.exp_avg_sq'", "f64[3]");
  bad = sd;
  bad["layers.0.w.exp_avg"] = Tensor::zeros({4}, {.dtype = kF64});
  EXPECT_TITAN_ERROR(o2.load_state_dict(bad), "key 'layers.0.w.exp_avg'", "expected f64[3]", "found f64[4]");
  bad = sd;
  bad["layers.1.w.step"] = Tensor::scalar<int64_t>(1);
  EXPECT_TITAN_ERROR(o2.load_state_dict(bad), "unexpected key 'layers.1.w.step'");
}

TEST(AdamW, RejectsParametersItCannotUpdate) {
  Tensor p = param({1, 2});
  EXPECT_TITAN_ERROR(AdamW({{"p", p}, {"q", p}}), "'q'", "another name");
  EXPECT_TITAN_ERROR(AdamW({{"p", p}, {"p", param({1})}}), "'p'", "twice");
  EXPECT_TITAN_ERROR(AdamW({{"n", Tensor::zeros({2})}}), "'n'", "requires grad");
  Tensor base = param({1, 2, 3, 4}, {2, 2});
  EXPECT_TITAN_ERROR(AdamW({{"t", base.detach().transpose(0, 1)}}), "'t'", "contiguous");
  EXPECT_TITAN_ERROR(AdamW({{"p", p}}, {.beta2 = 1.0}), "betas");
}

// ---- LR schedules --------------------------------------------------------------------------------

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{
      .training_steps = 100, .warmup_steps = 10, .decay_type = DecayType::cosine, .min_lr_factor = 0.1};
  EXPECT_NEAR(lr_factor(s, 0), 1.0 / 11, 1e-12);
  EXPECT_NEAR(lr_factor(s, 9), 10.0 / 11, 1e-12);
  EXPECT_NEAR(lr_factor(s, 10), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(s, 55), 0.55, 1e-12);  // half way: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(lr_factor(s, 99), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 89 / 90)), 1e-12);
  EXPECT_NEAR(lr_factor(s, 100), 0.1, 1e-12);
  EXPECT_NEAR(lr_factor(s, 1000), 0.1, 1e-12);
}

TEST(LrSchedule, LinearSqrtConstant) {
  LrSchedule lin{.training_steps = 100, .decay_type = DecayType::linear};
  EXPECT_NEAR(lr_factor(lin, 0), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(lin, 25), 0.75, 1e-12);
  EXPECT_NEAR(lr_factor(lin, 99), 0.01, 1e-12);
  LrSchedule sq{.training_steps = 100, .decay_type = DecayType::sqrt, .min_lr_factor = 0.2};
  EXPECT_NEAR(lr_factor(sq, 25), 0.2 + 0.8 * 0.5, 1e-12);
  LrSchedule flat{.training_steps = 100, .warmup_steps = 5, .decay_type = DecayType::constant};
  EXPECT_NEAR(lr_factor(flat, 3), 4.0 / 6, 1e-12);
  EXPECT_NEAR(lr_factor(flat, 5), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(flat, 99), 1.0, 1e-12);
}

TEST(LrSchedule, WarmupStableDecay) {
  // 10 warmup steps, decay over the last 20% (steps 80..99), flat in between.
  LrSchedule s{
      .training_steps = 100, .warmup_steps = 10, .decay_ratio = 0.2, .decay_type = DecayType::linear};
  EXPECT_NEAR(lr_factor(s, 10), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(s, 50), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(s, 80), 1.0, 1e-12);
  EXPECT_NEAR(lr_factor(s, 90), 0.5, 1e-12);
  EXPECT_NEAR(lr_factor(s, 99), 0.05, 1e-12);
  s.decay_type = DecayType::sqrt;
  EXPECT_NEAR(lr_factor(s, 90), 1 - std::sqrt(0.5), 1e-12);
  s.decay_type = DecayType::cosine;
  EXPECT_NEAR(lr_factor(s, 90), 0.5, 1e-12);
  s.decay_ratio = 0.0;  // no decay at all
  EXPECT_NEAR(lr_factor(s, 99), 1.0, 1e-12);
}

TEST(LrSchedule, InvalidSchedulesNameTheField) {
  EXPECT_TITAN_ERROR(lr_factor({.training_steps = 10, .warmup_steps = 11}, 0), "warmup_steps", "11");
  EXPECT_TITAN_ERROR(lr_factor({.training_steps = 10, .decay_ratio = 1.5}, 0), "decay_ratio", "1.5");
  EXPECT_TITAN_ERROR(lr_factor({.training_steps = 10, .warmup_steps = 5, .decay_ratio = 0.6}, 0), "overlap",
                     "decay_ratio");
  EXPECT_TITAN_ERROR(lr_factor({.training_steps = 10, .min_lr_factor = -1}, 0), "min_lr_factor");
  EXPECT_TITAN_ERROR(lr_factor({.training_steps = 10}, -1), "step", "-1");
}

TEST(LrSchedule, SchedulerDrivesTheOptimizer) {
  Tensor p = param({1});
  AdamW opt({{"p", p}}, {.lr = 0.3});
  optim::LrScheduler sched(opt, {.training_steps = 10, .warmup_steps = 2, .decay_type = DecayType::linear});
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.2);
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.3);
  EXPECT_EQ(sched.current_step(), 2);
  sched.set_step(6);  // a resumed run: 4 of 8 decay steps done
  EXPECT_DOUBLE_EQ(opt.lr(), 0.15);
  EXPECT_DOUBLE_EQ(sched.lr_at(2), 0.3);
}

// ---- clipping ------------------------------------------------------------------------------------

TEST(Clip, TotalNormAndScaling) {
  // Gradients (3, 4) and (12): 2-norm 13, inf-norm 12; mixed dtypes; c has no gradient.
  Tensor a = param({0, 0}), b = Tensor::zeros({1}).requires_grad_(), c = param({5});
  set_grad(a, {3, 4});
  set_grad(b, {12});
  std::vector<Tensor> params = {a, b, c};
  EXPECT_DOUBLE_EQ(optim::grad_norm_partial(params, 2.0), 169.0);
  EXPECT_DOUBLE_EQ(optim::grad_norm_from_partial(169.0, 2.0), 13.0);

  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(params, 20.0), 13.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 4})) << "below max_norm: untouched";

  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(params, 6.5), 13.0);
  double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 3 * coef, 1e-15);
  EXPECT_NEAR(a.grad().to_vector<double>()[1], 4 * coef, 1e-15);
  EXPECT_NEAR(first(b.grad()), 12 * coef, 1e-5);
  EXPECT_FALSE(c.grad().defined());

  set_grad(a, {3, -4});
  set_grad(b, {-12});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(params, 6.0, INFINITY), 12.0);
  EXPECT_NEAR(first(b.grad()), -12 * 6.0 / (12.0 + 1e-6), 1e-5);
  EXPECT_NEAR(a.grad().to_vector<double>()[1], -4 * 6.0 / (12.0 + 1e-6), 1e-15);

  EXPECT_TITAN_ERROR(optim::clip_grad_norm_(params, 1.0, 1.0), "norm_type", "2 or inf");
  EXPECT_TITAN_ERROR(optim::clip_grad_norm_(params, 0.0), "max_norm");
}

TEST(Clip, CoefficientIsOneUnlessTheNormExceedsMaxNorm) {
  EXPECT_EQ(optim::clip_coefficient(1.0, 0.5), 1.0);
  EXPECT_EQ(optim::clip_coefficient(1.0, std::nan("")), 1.0);
  EXPECT_DOUBLE_EQ(optim::clip_coefficient(1.0, 4.0), 1.0 / (4.0 + 1e-6));
  EXPECT_TITAN_ERROR(optim::clip_coefficient(0.0, 4.0), "max_norm");
}

// Past the threshold where the partials are summed by threads, against a serial fp64 sum.
TEST(Clip, NormPartialsOfLargeGradientsMatchASerialSum) {
  const int64_t n = 300001;
  std::vector<double> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[i] = std::sin(0.001 * static_cast<double>(i)) * (i % 7 == 0 ? 3 : 1);
  double squares = 0, top = 0;
  for (double x : g) {
    const float f = static_cast<float>(x);
    squares += static_cast<double>(f) * f;
    top = std::max(top, std::abs(static_cast<double>(f)));
  }
  Tensor p = Tensor::zeros({n}).requires_grad_();
  set_grad(p, g);
  EXPECT_NEAR(optim::grad_norm_partial({p}, 2.0), squares, 1e-12 * squares);
  EXPECT_EQ(optim::grad_norm_partial({p}, INFINITY), top);
  g[n / 3] = NAN;
  set_grad(p, g);
  EXPECT_TRUE(std::isnan(optim::grad_norm_partial({p}, 2.0)));
  EXPECT_TRUE(std::isnan(optim::grad_norm_partial({p}, INFINITY))) << "a NaN must reach the inf-norm too";
}

TEST(Clip, NonFiniteNormLeavesGradientsAlone) {
  Tensor a = param({0, 0});
  set_grad(a, {NAN, 1});
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector<double>()[1], 1.0);
}

}  // namespace
}  // namespace titan
