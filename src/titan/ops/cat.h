#pragma once
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::ops {

// The tensors joined along `dim` (negative counts from the end), as torch.cat: one dtype, every
// other dim equal. Backward hands each input its slice of the gradient.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);

// x cut along `dim` into consecutive pieces of `sizes` (summing to x's size there), as torch.split
// with a list of sizes: views of x. One backward for all pieces joins their gradients with cat
// (zeros for a piece that got none), where a narrow per piece would pad each gradient to x's
// size and add them up: a fused projection's parts (FLUX's Q/K/V and MLP) cost one pass, not one
// per part.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace titan::ops
