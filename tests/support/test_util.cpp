#include "support/test_util.h"

#include <algorithm>
#include <cmath>

namespace titan::test {

double max_rel_error(const Tensor& a, const Tensor& ref, double floor) {
  std::vector<double> x = a.to_vector<double>(), y = ref.to_vector<double>();
  double scale = floor, err = 0;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (std::isnan(x[i]) != std::isnan(y[i])) d = INFINITY;
    err = std::max(err, d);
  }
  return err / scale;
}

::testing::AssertionResult tensors_close(const Tensor& a, const Tensor& ref, double tol,
                                         const std::string& what) {
  if (a.sizes() != ref.sizes())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(a.sizes()) << " vs reference "
                                         << shape_str(ref.sizes());
  double e = max_rel_error(a, ref);
  if (e <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << e << " > " << tol;
}

Tensor rand_f64(const Shape& s, uint64_t seed, bool requires_grad, double lo, double hi) {
  Generator g(seed);
  Tensor t = Tensor::rand(s, g, {.dtype = kF64}, lo, hi);
  if (requires_grad) t.requires_grad_();
  return t;
}

Tensor rand_f32(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return Tensor::rand(s, g, {.dtype = kF32}, lo, hi);
}

}  // namespace titan::test
