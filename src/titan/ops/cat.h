#pragma once
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::ops {

// The tensors joined along `dim` (negative counts from the end), as torch.cat: one dtype, every
// other dim equal. Backward hands each input its slice of the gradient.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace titan::ops
