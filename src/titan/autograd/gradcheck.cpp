#include "titan/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"

namespace titan::autograd {

namespace {
double project(const std::vector<Tensor>& outs, const std::vector<Tensor>& cot) {
  double l = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    std::vector<double> o = outs[k].to_vector<double>();
    const double* v = cot[k].data<double>();
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * v[i];
  }
  return l;
}
}  // namespace

GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts) {
  for (const Tensor& in : inputs)
    TITAN_CHECK(!in.requires_grad() || (in.dtype() == kF64 && in.is_contiguous() && in.is_leaf()),
                "gradcheck: inputs that require grad must be contiguous f64 leaves, got ", in.desc());
  std::vector<Tensor> outs = fn(inputs);
  Generator gen(opts.seed);
  std::vector<Tensor> cot;
  for (const Tensor& o : outs) cot.push_back(Tensor::randn(o.sizes(), gen, {.dtype = kF64}));
  std::vector<Tensor> wrt;
  for (const Tensor& in : inputs)
    if (in.requires_grad()) wrt.push_back(in);
  std::vector<Tensor> analytic = grad(outs, cot, wrt);

  GradcheckResult res;
  NoGradGuard no_grad;
  for (size_t w = 0; w < wrt.size(); ++w) {
    double* p = wrt[w].data<double>();
    std::vector<double> a = analytic[w].to_vector<double>();
    for (int64_t i = 0; i < wrt[w].numel(); ++i) {
      double orig = p[i];
      p[i] = orig + opts.eps;
      double lp = project(fn(inputs), cot);
      p[i] = orig - opts.eps;
      double lm = project(fn(inputs), cot);
      p[i] = orig;
      double numeric = (lp - lm) / (2 * opts.eps);
      double err = std::abs(numeric - a[i]);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (!(err <= opts.atol + opts.rtol * std::abs(numeric)) && res.ok) {
        res.ok = false;
        std::ostringstream os;
        os << "input " << w << " " << wrt[w].desc() << " element " << i << ": analytic " << a[i]
           << " vs numeric " << numeric << " (error " << err << ")";
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace titan::autograd
