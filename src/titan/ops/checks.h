#pragma once
// Argument checks and input preparation shared by the ops in this folder.
#include "titan/core/tensor.h"

namespace titan::ops {

// `t` is a CPU tensor of f32 or f64; names the op and the argument otherwise.
inline void check_float(const char* op, const char* arg, const Tensor& t) {
  check_cpu(op, t);
  TITAN_CHECK(t.dtype() == kF32 || t.dtype() == kF64, op, ": ", arg, " must be f32 or f64, got ",
              t.desc());
}

// A dense copy (or the tensor itself) for kernels that read contiguous buffers. Detached, so that
// contiguous() records no autograd node of its own: the op records one for the original input.
inline Tensor dense(const Tensor& t) { return t.detach().contiguous(); }

}  // namespace titan::ops
