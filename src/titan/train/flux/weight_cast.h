#pragma once
// What a FLUX weights folder writer stores: every tensor cast to the dtype the file is written in.
#include <map>
#include <string>

#include "titan/nn/module.h"

namespace titan::train::flux {

// Throws, naming `where` and the tensor, for a tensor that is not floating point, and for a dtype
// that torch checkpoints do not hold.
std::map<std::string, Tensor> cast_weights(const nn::StateDict& state, DType dtype, const std::string& where);

}  // namespace titan::train::flux
