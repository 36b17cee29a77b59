#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

Tensor sum(const Tensor& x);  // all elements
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// Max along dim; the gradient goes to the first maximal element.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance along dim with `correction` (1 = unbiased, as torch.var's default).
Tensor var(const Tensor& x, int64_t dim, bool keepdim = false, int64_t correction = 1);
// Sums a broadcast gradient back down to `shape` (the reverse of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace titan::ops
