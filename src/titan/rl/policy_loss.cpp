#include "titan/rl/policy_loss.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "titan/autograd/node.h"
#include "titan/core/error.h"

namespace titan::rl {

std::vector<double> group_advantages(std::span<const double> rewards, int64_t group_size, AdvantageNorm norm,
                                     double eps) {
  TITAN_CHECK(group_size >= 1, "group_advantages: group_size must be at least 1, got ", group_size);
  const int64_t n = static_cast<int64_t>(rewards.size());
  TITAN_CHECK(n % group_size == 0, "group_advantages: ", n, " rewards do not split into groups of ",
              group_size, "; pass group_size rewards (completions) for every prompt");
  TITAN_CHECK(norm != AdvantageNorm::unbiased_std || group_size >= 2,
              "group_advantages: the unbiased std of a group of 1 divides by G - 1 = 0; draw at least 2 "
              "completions per prompt, or normalise by none or the population std");
  TITAN_CHECK(std::isfinite(eps) && eps >= 0, "group_advantages: eps must be finite and >= 0, got ", eps);
  std::vector<double> adv(rewards.size());
  for (int64_t g0 = 0; g0 < n; g0 += group_size) {
    const std::span<const double> group = rewards.subspan(g0, group_size);
    // The mean as an offset from the first reward, so that a group of equal rewards centres to
    // exact zeros (summing G copies of 0.1 and dividing by G does not give back 0.1).
    double offset = 0;
    for (double r : group) offset += r - group[0];
    const double mean = group[0] + offset / static_cast<double>(group_size);
    double squares = 0;
    for (double r : group) squares += (r - mean) * (r - mean);
    // A group of equal rewards stays at zeros, also with eps = 0 (where 0 / 0 would be NaN).
    double scale = 1;
    if (norm != AdvantageNorm::none && squares > 0) {
      const double dof = static_cast<double>(norm == AdvantageNorm::std ? group_size : group_size - 1);
      scale = 1 / (std::sqrt(squares / dof) + eps);
    }
    for (int64_t i = 0; i < group_size; ++i) adv[g0 + i] = (group[i] - mean) * scale;
  }
  return adv;
}

namespace {

// One valid token's inputs; ref is null without a reference policy.
struct Token {
  double logp, old_logp, adv;
  const double* ref;
};

struct Ratio {
  double r;      // exp(clamped log-ratio)
  bool clamped;  // the log-ratio was past the clamp, so r does not move with logp
};

Ratio ratio_of(const Token& t, const PolicyLossOptions& o) {
  const double lr = t.logp - t.old_logp;
  return {std::exp(std::clamp(lr, -o.log_ratio_clamp, o.log_ratio_clamp)), std::abs(lr) > o.log_ratio_clamp};
}

double clipped_ratio(double r, const PolicyLossOptions& o) {
  return std::clamp(r, 1 - o.clip_low, 1 + o.clip_high);
}

// Which term a token's pg is: -r * A, the clipped -clip(r) * A (r past the clip on the side A
// favours), or the dual clip's -c * A. Ties go to the unclipped term, whose value and gradient
// there equal the clipped one's.
enum class Branch { ratio, clipped, dual };

Branch branch_of(double r, double a, const PolicyLossOptions& o) {
  const double unclipped = -a * r, clipped = -a * clipped_ratio(r, o);
  if (o.dual_clip > 0 && a < 0 && -o.dual_clip * a < std::max(unclipped, clipped)) return Branch::dual;
  return clipped > unclipped ? Branch::clipped : Branch::ratio;
}

// k3 = exp(d) - d - 1 with d = ref - logp: non-negative, unbiased for KL(policy || ref) under
// samples from the policy, and low-variance (Schulman's estimator; VeRL's low_var_kl). As VeRL,
// d is clamped to +-20 and k3 to at most 10, so that one token the reference finds unlikely
// cannot make the loss infinite in f32; past either clamp the term has no gradient.
constexpr double kKlLogClamp = 20, kKlClamp = 10;
struct K3 {
  double value;
  bool clamped;
};
K3 k3(const Token& t) {
  const double raw = *t.ref - t.logp, d = std::clamp(raw, -kKlLogClamp, kKlLogClamp);
  const double k = std::exp(d) - d - 1;
  return {std::min(k, kKlClamp), d != raw || k > kKlClamp};
}

struct TokenLoss {
  double value;  // pg + kl_coef * k3
  double ratio;
  double kl;  // k3, 0 without a reference
  bool clipped;
};

// Forward, per token.
TokenLoss token_loss(const Token& t, const PolicyLossOptions& o) {
  const Ratio q = ratio_of(t, o);
  const Branch b = branch_of(q.r, t.adv, o);
  const double pg = b == Branch::ratio     ? -t.adv * q.r
                    : b == Branch::clipped ? -t.adv * clipped_ratio(q.r, o)
                                           : -o.dual_clip * t.adv;
  const double kl = t.ref ? k3(t).value : 0;
  return {pg + (o.kl_coef > 0 ? o.kl_coef * kl : 0), q.r, kl, b != Branch::ratio};
}

// Backward, per token: d token_loss(t).value / d logp. Only the unclipped term moves with r, and
// r = exp(clamp(logp - old_logp)) has dr/dlogp = r inside the clamp, 0 past it;
// dk3/dlogp = 1 - exp(ref - logp) inside its clamps, 0 past them.
double token_loss_grad(const Token& t, const PolicyLossOptions& o) {
  const Ratio q = ratio_of(t, o);
  const double dpg = !q.clamped && branch_of(q.r, t.adv, o) == Branch::ratio ? -t.adv * q.r : 0;
  const double dkl =
      t.ref && o.kl_coef > 0 && !k3(t).clamped ? o.kl_coef * (1 - std::exp(*t.ref - t.logp)) : 0;
  return dpg + dkl;
}

// The inputs as f64, row-major, kept for the backward.
struct Batch {
  int64_t rows = 0, cols = 0;
  std::vector<double> logp, old_logp, adv, mask, ref;
  PolicyLossOptions opts;
  double normaliser = 1;

  Token token(int64_t i) const {
    return {logp[i], old_logp[i], adv[i / cols], ref.empty() ? nullptr : &ref[i]};
  }
};

std::vector<double> values_of(const Tensor& t) {
  return t.detach().to(kF64).to_vector<double>();
}

void check_input(const char* name, const Tensor& t, const Shape& shape) {
  TITAN_CHECK(t.defined(), "policy_loss: ", name, " is undefined; pass a tensor of shape ", shape_str(shape));
  check_cpu("policy_loss", t);
  TITAN_CHECK(t.dtype() == kF32 || t.dtype() == kF64, "policy_loss: ", name, " must be f32 or f64, got ",
              t.desc());
  TITAN_CHECK(t.sizes() == shape, "policy_loss: ", name, " must have shape ", shape_str(shape),
              " (logp's [B, T], or [B] for advantages), got ", t.desc());
}

void check_options(const PolicyLossOptions& o) {
  TITAN_CHECK(std::isfinite(o.clip_low) && o.clip_low >= 0 && o.clip_low < 1,
              "policy_loss: clip_low must be in [0, 1) (the ratio's floor is 1 - clip_low), got ",
              o.clip_low);
  TITAN_CHECK(std::isfinite(o.clip_high) && o.clip_high >= 0, "policy_loss: clip_high must be >= 0, got ",
              o.clip_high);
  TITAN_CHECK(o.dual_clip == 0 || (std::isfinite(o.dual_clip) && o.dual_clip > 1),
              "policy_loss: dual_clip must be 0 (off) or a finite c > 1, got ", o.dual_clip);
  TITAN_CHECK(std::isfinite(o.kl_coef) && o.kl_coef >= 0,
              "policy_loss: kl_coef must be finite and >= 0, got ", o.kl_coef);
  TITAN_CHECK(o.log_ratio_clamp > 0, "policy_loss: log_ratio_clamp must be > 0, got ", o.log_ratio_clamp);
}

}  // namespace

Tensor policy_loss(const Tensor& logp, const Tensor& old_logp, const Tensor& advantages, const Tensor& mask,
                   const Tensor& ref_logp, const PolicyLossOptions& opts, double normaliser,
                   PolicyLossStats* stats) {
  check_options(opts);
  TITAN_CHECK(std::isfinite(normaliser) && normaliser > 0,
              "policy_loss: normaliser must be positive and finite (the global count of valid tokens), got ",
              normaliser);
  TITAN_CHECK(logp.defined() && logp.dim() == 2, "policy_loss: logp must be [B, T] (one log-probability per ",
              "sampled token), got ", logp.defined() ? logp.desc() : std::string("an undefined tensor"));
  const Shape tokens = logp.sizes();
  check_input("logp", logp, tokens);
  check_input("old_logp", old_logp, tokens);
  check_input("advantages", advantages, {tokens[0]});
  check_input("mask", mask, tokens);
  TITAN_CHECK(opts.kl_coef == 0 || ref_logp.defined(), "policy_loss: kl_coef is ", opts.kl_coef,
              " but ref_logp is undefined; pass the reference policy's log-probabilities [B, T], or set "
              "kl_coef = 0");
  if (ref_logp.defined()) check_input("ref_logp", ref_logp, tokens);

  auto batch = std::make_shared<Batch>();
  Batch& b = *batch;
  b.rows = tokens[0];
  b.cols = tokens[1];
  b.logp = values_of(logp);
  b.old_logp = values_of(old_logp);
  b.adv = values_of(advantages);
  b.mask = values_of(mask);
  if (ref_logp.defined()) b.ref = values_of(ref_logp);
  b.opts = opts;
  b.normaliser = normaliser;

  double sum = 0, ratios = 0, kls = 0;
  int64_t count = 0, clipped = 0;
  for (int64_t i = 0; i < b.rows * b.cols; ++i) {
    TITAN_CHECK(b.mask[i] == 0 || b.mask[i] == 1,
                "policy_loss: mask must hold 0 or 1 (token valid or not), got ", b.mask[i], " at [",
                i / b.cols, ", ", i % b.cols, "]");
    if (b.mask[i] == 0) continue;
    const TokenLoss t = token_loss(b.token(i), opts);
    sum += t.value;
    ratios += t.ratio;
    kls += t.kl;
    clipped += t.clipped ? 1 : 0;
    ++count;
  }
  if (stats) {
    const double n = count > 0 ? static_cast<double>(count) : 1;
    *stats = {.clip_fraction = static_cast<double>(clipped) / n,
              .ratio_mean = ratios / n,
              .kl_mean = kls / n,
              .tokens = count};
  }
  Tensor out = Tensor::full({}, sum / normaliser, logp.options());

  const DType dtype = logp.dtype();
  auto backward = [batch, dtype](const autograd::GradContext& g) {
    const Batch& b = *batch;
    const double scale = g[0].item() / b.normaliser;
    std::vector<double> d(b.logp.size(), 0.0);
    for (int64_t i = 0; i < b.rows * b.cols; ++i)
      if (b.mask[i] != 0) d[i] = token_loss_grad(b.token(i), b.opts) * scale;
    return std::vector<Tensor>{Tensor::from_vector<double>(d, {b.rows, b.cols}).to(dtype)};
  };
  autograd::record("policy_loss", {logp}, {out}, backward);
  return out;
}

}  // namespace titan::rl
