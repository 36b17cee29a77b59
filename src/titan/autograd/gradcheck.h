#pragma once
// Checks analytic gradients against f64 central differences of L = sum(fn(inputs) * v) for a
// fixed random v, so every output element and every input element is exercised.
#include <functional>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // where the worst mismatch is, when !ok
};

// `inputs` must be contiguous f64 leaves; those with requires_grad() are checked. `fn` may return
// several tensors; each gets its own random cotangent.
GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {});

}  // namespace titan::autograd
