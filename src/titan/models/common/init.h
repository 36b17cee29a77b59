#pragma once
// TorchTitan's initialisation of decoder weights, shared by the model families.
#include <cmath>
#include <cstdint>

#include "titan/nn/init.h"

namespace titan::models::common {

// The std of the input projections (wq, wk, wv, w1) and of the depth-scaled ones' base.
constexpr double kInitStd = 0.02;

// TorchTitan's depth init: the projections that write into the residual stream start smaller the
// deeper the block, so the stream's variance grows slowly with depth.
inline double depth_init_std(int64_t layer_id) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(layer_id + 1));
}

// TorchTitan's default truncation: PyTorch's trunc_normal_ bounds are absolute, so at std 0.02 the
// cut at +-2 is 100 std away and changes nothing.
inline void trunc_normal(const Tensor& w, double std, Generator& gen) {
  nn::init::trunc_normal_(w, 0.0, std, -2.0, 2.0, gen);
}

}  // namespace titan::models::common
