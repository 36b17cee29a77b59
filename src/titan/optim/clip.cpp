#include "titan/optim/clip.h"

#include <cmath>

#include "titan/graph/ir/hlo.h"
#include "titan/kernels/cpu/elementwise.h"
#include "titan/kernels/cpu/reduce.h"

namespace titan::optim {

namespace {
void check_norm_type(double norm_type) {
  TITAN_CHECK(norm_type == 2.0 || norm_type == INFINITY, "clip_grad_norm_: norm_type must be 2 or inf, got ",
              norm_type);
}

// Sum of g^2, or max |g|, of one gradient, in double.
template <typename T>
double partial_of(const Tensor& g, bool inf) {
  const Tensor c = g.contiguous();
  return inf ? kernels::cpu::max_abs<T>(c.data<T>(), c.numel())
             : kernels::cpu::sum_squares<T>(c.data<T>(), c.numel());
}
}  // namespace

double grad_norm_partial(const std::vector<Tensor>& params, double norm_type) {
  check_norm_type(norm_type);
  bool inf = norm_type == INFINITY;
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    check_cpu("clip_grad_norm_", g);
    TITAN_CHECK(g.dtype() == kF32 || g.dtype() == kF64, "clip_grad_norm_: gradient ", g.desc(),
                " is neither f32 nor f64");
    double part = g.dtype() == kF32 ? partial_of<float>(g, inf) : partial_of<double>(g, inf);
    // std::max(total, NaN) would drop a NaN that the 2-norm's sum keeps.
    total = inf ? (part > total || std::isnan(part) ? part : total) : total + part;
  }
  return total;
}

double grad_norm_from_partial(double partial, double norm_type) {
  check_norm_type(norm_type);
  return norm_type == INFINITY ? partial : std::sqrt(partial);
}

double clip_coefficient(double max_norm, double total_norm) {
  TITAN_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  const double coef = max_norm / (total_norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;  // also 1 when total_norm is NaN
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  const double coef = clip_coefficient(max_norm, total_norm);
  if (coef == 1.0) return;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) kernels::cpu::affine(g, coef, 0.0, g);
  }
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  double total = grad_norm_from_partial(grad_norm_partial(params, norm_type), norm_type);
  clip_grads_with_norm_(params, max_norm, total);
  return total;
}

graph::Value grad_norm_lowered(const std::vector<graph::Value>& grads) {
  namespace hlo = graph::hlo;
  graph::Value total = hlo::scalar(0.0, kF64);
  for (const graph::Value& g : grads) {
    const graph::Value g64 = hlo::convert(g, kF64);
    Shape all(g.shape.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    total = hlo::add(total, hlo::reduce_sum(hlo::mul(g64, g64), all));
  }
  return hlo::sqrt(total);
}

graph::Value clip_coefficient_lowered(const graph::Value& total_norm, double max_norm) {
  namespace hlo = graph::hlo;
  TITAN_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  const DType dt = total_norm.dtype;
  const graph::Value coef = hlo::div(hlo::scalar(max_norm, dt), hlo::add(total_norm, 1e-6));
  const graph::Value one = hlo::scalar(1.0, dt);
  // coef < 1 ? coef : 1, so that a NaN norm gives 1 as clip_coefficient does.
  return hlo::select(hlo::compare(coef, one, "LT"), coef, one);
}

}  // namespace titan::optim
