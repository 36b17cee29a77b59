#include "titan/train/flux/weight_cast.h"

#include "titan/checkpoint/hf_checkpoint.h"

namespace titan::train::flux {

std::map<std::string, Tensor> cast_weights(const nn::StateDict& state, DType dtype, const std::string& where) {
  checkpoint::torch_dtype_name(dtype);  // refuses what torch checkpoints do not hold
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state) {
    TITAN_CHECK(is_floating(t.dtype()), where, ": tensor '", name, "' is ", t.desc(), "; weights are floating");
    out.emplace(name, t.detach().to(dtype));
  }
  return out;
}

}  // namespace titan::train::flux
