#pragma once
// Which normalisation a decoder's norms are, as data: the hf family reads it from config.json.
#include <cstdint>
#include <memory>

#include "titan/nn/norm.h"

namespace titan::models::common {

struct NormArgs {
  enum class Kind { rms, layer };
  Kind kind = Kind::rms;
  double eps = 1e-5;
  bool unit_offset = false;  // RMSNorm scaling by (1 + weight), as Gemma's
  bool bias = true;          // LayerNorm's bias
};

inline std::shared_ptr<nn::Norm> make_norm(int64_t dim, const NormArgs& args, TensorOptions opts) {
  if (args.kind == NormArgs::Kind::layer) return std::make_shared<nn::LayerNorm>(dim, args.eps, true, args.bias, opts);
  return std::make_shared<nn::RMSNorm>(dim, args.eps, opts, args.unit_offset);
}

}  // namespace titan::models::common
