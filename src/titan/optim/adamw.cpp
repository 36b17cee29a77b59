#include "titan/optim/adamw.h"

#include <cmath>
#include <sstream>
#include <unordered_set>

#include "titan/core/memory_owner.h"
#include "titan/core/trace.h"
#include "titan/graph/ir/hlo.h"
#include "titan/kernels/cpu/adamw.h"
#include "titan/ops/custom_calls.h"

namespace titan::optim {

namespace {
// Key suffixes of the state dict.
constexpr const char* kExpAvg = ".exp_avg";
constexpr const char* kExpAvgSq = ".exp_avg_sq";
constexpr const char* kStep = ".step";
}  // namespace

AdamW::AdamW(const std::vector<std::pair<std::string, Tensor>>& params, AdamWOptions opts)
    : opts_(std::move(opts)) {
  TITAN_CHECK(opts_.lr >= 0 && opts_.eps >= 0 && opts_.weight_decay >= 0, "AdamW: lr, eps and weight_decay ",
              "must be non-negative, got lr=", opts_.lr, " eps=", opts_.eps,
              " weight_decay=", opts_.weight_decay);
  TITAN_CHECK(opts_.beta1 >= 0 && opts_.beta1 < 1 && opts_.beta2 >= 0 && opts_.beta2 < 1,
              "AdamW: betas must lie in [0, 1), got (", opts_.beta1, ", ", opts_.beta2, ")");
  std::unordered_set<const TensorImpl*> seen;
  MemoryOwnerScope owner(MemoryCategory::optimizer_state);
  for (const auto& [name, p] : params) {
    TITAN_CHECK(
        p.defined() && p.device().is_cpu() && (p.dtype() == kF32 || p.dtype() == kF64) && p.is_contiguous(),
        "AdamW: parameter '", name, "' is ", p.defined() ? p.desc() : "undefined",
        "; the fused update needs a contiguous f32 or f64 tensor on the CPU");
    TITAN_CHECK(p.is_leaf() && p.requires_grad(), "AdamW: parameter '", name,
                "' must be a leaf that requires grad (register it with Module::register_parameter)");
    TITAN_CHECK(!index_.count(name), "AdamW: parameter name '", name, "' given twice");
    TITAN_CHECK(seen.insert(p.impl()).second, "AdamW: parameter '", name,
                "' is a tensor already given under another name; it would be updated twice");
    bool decay = !(opts_.no_decay && opts_.no_decay(name, p));
    index_.emplace(name, entries_.size());
    entries_.push_back(
        {name, p, decay, {Tensor::zeros(p.sizes(), p.options()), Tensor::zeros(p.sizes(), p.options()), 0}});
  }
}

int64_t AdamW::state_bytes(const std::vector<std::pair<std::string, Tensor>>& params) {
  int64_t bytes = 0;
  for (const auto& [name, p] : params) bytes += 2 * static_cast<int64_t>(p.nbytes());  // exp_avg, exp_avg_sq
  return bytes;
}

void AdamW::step(double grad_scale) {
  TITAN_CHECK(grad_scale > 0 && std::isfinite(grad_scale),
              "AdamW::step: grad_scale must be finite and > 0, got ", grad_scale);
  trace::Span span("AdamW::step", "optimizer");
  span.arg("tensors", entries_.size()).arg("lr", opts_.lr).arg("grad_scale", grad_scale);
  for (Entry& e : entries_) {
    Tensor g = e.param.grad();
    if (!g.defined()) continue;
    g = g.contiguous();  // gradients are contiguous unless someone set a strided one by hand
    ++e.state.step;
    kernels::cpu::AdamWHyper h{.lr = opts_.lr,
                               .beta1 = opts_.beta1,
                               .beta2 = opts_.beta2,
                               .eps = opts_.eps,
                               .weight_decay = e.decay ? opts_.weight_decay : 0.0,
                               .step = e.state.step,
                               .grad_scale = grad_scale};
    int64_t n = e.param.numel();
    if (e.param.dtype() == kF32) {
      kernels::cpu::adamw_step<float>(e.param.data<float>(), g.data<float>(), e.state.exp_avg.data<float>(),
                                      e.state.exp_avg_sq.data<float>(), n, h);
    } else {
      kernels::cpu::adamw_step<double>(e.param.data<double>(), g.data<double>(),
                                       e.state.exp_avg.data<double>(), e.state.exp_avg_sq.data<double>(), n,
                                       h);
    }
  }
}

kernels::cpu::AdamWScalars AdamW::step_scalars(const std::string& name, int64_t step) const {
  const Entry& e = entry(name);
  return kernels::cpu::adamw_scalars({.lr = opts_.lr,
                                      .beta1 = opts_.beta1,
                                      .beta2 = opts_.beta2,
                                      .eps = opts_.eps,
                                      .weight_decay = e.decay ? opts_.weight_decay : 0.0,
                                      .step = step});
}

LoweredAdamW adamw_update_lowered(const graph::Value& param, const graph::Value& grad, const graph::Value& exp_avg,
                                  const graph::Value& exp_avg_sq, const graph::Value& decay,
                                  const graph::Value& neg_step_size, const graph::Value& bc2_sqrt,
                                  const graph::Value& grad_scale, const AdamWOptions& opts) {
  namespace hlo = graph::hlo;
  const Shape& shape = param.shape;
  const DType dt = param.dtype;
  if (graph::current_program().custom_kernels() && (dt == kF32 || dt == kF64) && grad.dtype == dt &&
      exp_avg.dtype == dt && exp_avg_sq.dtype == dt) {
    // The eager kernel in one pass, updating the state in place; XLA's fusions read the state in
    // three.
    const std::vector<graph::Value> u = ops::adamw_call(param, grad, exp_avg, exp_avg_sq,
                                                        {decay, neg_step_size, bc2_sqrt, grad_scale}, opts.beta1,
                                                        opts.beta2, opts.eps);
    return {.param = u[0], .exp_avg = u[1], .exp_avg_sq = u[2]};
  }
  auto splat = [&](const graph::Value& s) { return hlo::broadcast_to(hlo::convert(s, dt), shape); };
  auto constant = [&](double c) { return hlo::constant(c, shape, dt); };
  const graph::Value g = hlo::mul(grad, splat(grad_scale));
  const graph::Value m = hlo::add(hlo::mul(exp_avg, constant(opts.beta1)), hlo::mul(constant(1.0 - opts.beta1), g));
  const graph::Value v =
      hlo::add(hlo::mul(exp_avg_sq, constant(opts.beta2)), hlo::mul(hlo::mul(constant(1.0 - opts.beta2), g), g));
  const graph::Value denom = hlo::add(hlo::div(hlo::sqrt(v), splat(bc2_sqrt)), constant(opts.eps));
  const graph::Value p =
      hlo::add(hlo::mul(param, splat(decay)), hlo::mul(splat(neg_step_size), hlo::div(m, denom)));
  return {.param = p, .exp_avg = m, .exp_avg_sq = v};
}

void AdamW::zero_grad() {
  for (Entry& e : entries_) e.param.set_grad(Tensor());
}

void AdamW::set_lr(double lr) {
  TITAN_CHECK(lr >= 0, "AdamW::set_lr: lr must be non-negative, got ", lr);
  opts_.lr = lr;
}

const AdamW::Entry& AdamW::entry(const std::string& name) const {
  auto it = index_.find(name);
  TITAN_CHECK(it != index_.end(), "AdamW: no parameter named '", name, "' in this optimizer");
  return entries_[it->second];
}

const AdamW::ParamState& AdamW::state(const std::string& name) const {
  return entry(name).state;
}

std::map<std::string, Tensor> AdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const Entry& e : entries_) {
    out.emplace(e.name + kExpAvg, e.state.exp_avg);
    out.emplace(e.name + kExpAvgSq, e.state.exp_avg_sq);
    out.emplace(e.name + kStep, Tensor::scalar<int64_t>(e.state.step));
  }
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, std::string> expected;  // key -> the desc() its tensor must have
  for (const Entry& e : entries_) {
    expected[e.name + kExpAvg] = e.param.desc();
    expected[e.name + kExpAvgSq] = e.param.desc();
    expected[e.name + kStep] = "i64[]";
  }
  std::vector<std::string> problems;
  for (const auto& [key, desc] : expected) {
    auto it = state.find(key);
    if (it == state.end())
      problems.push_back("missing key '" + key + "' (expected " + desc + ")");
    else if (it->second.desc() != desc)
      problems.push_back("key '" + key + "': expected " + desc + ", found " + it->second.desc());
  }
  for (const auto& [key, t] : state)
    if (!expected.count(key)) problems.push_back("unexpected key '" + key + "' (found " + t.desc() + ")");
  std::ostringstream report;
  for (size_t i = 0; i < problems.size(); ++i) report << (i ? "; " : "") << problems[i];
  TITAN_CHECK(problems.empty(), "AdamW::load_state_dict: ", report.str(),
              ". Nothing was loaded: the optimizer state was saved for other parameters (another "
              "model, config or parallel layout)");
  for (Entry& e : entries_) {
    e.state.exp_avg.copy_(state.at(e.name + kExpAvg));
    e.state.exp_avg_sq.copy_(state.at(e.name + kExpAvgSq));
    e.state.step = static_cast<int64_t>(state.at(e.name + kStep).item());
  }
}

}  // namespace titan::optim
