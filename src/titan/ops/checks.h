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

// logits [..., V] (f32 or f64, V > 0) and integer class targets [...] (i32 or i64) of the
// logits' shape without the class dim, for the ops that pick a class per row (cross_entropy,
// token_log_probs); names the op and what is wrong otherwise. Returns V. Leaves the device to the
// caller: graph mode lowers some of these ops.
inline int64_t check_class_logits(const char* op, const Tensor& logits, const Tensor& targets) {
  TITAN_CHECK(logits.dtype() == kF32 || logits.dtype() == kF64, op,
              ": logits must be an f32 or f64 tensor, got ", logits.desc());
  TITAN_CHECK(targets.dtype() == kI32 || targets.dtype() == kI64, op,
              ": targets must be class indices (i32 or i64), got ", targets.desc());
  TITAN_CHECK(logits.dim() >= 1, op, ": logits must have a class dim (the last), got ", logits.desc());
  const Shape row_shape(logits.sizes().begin(), logits.sizes().end() - 1);
  TITAN_CHECK(targets.sizes() == row_shape, op, ": logits ", logits.desc(), " need targets of shape ",
              shape_str(row_shape), " (the logits' shape without the class dim), got ", targets.desc());
  TITAN_CHECK(logits.size(-1) > 0, op, ": logits ", logits.desc(), " have no classes");
  return logits.size(-1);
}

// A dense copy (or the tensor itself) for kernels that read contiguous buffers. Detached, so that
// contiguous() records no autograd node of its own: the op records one for the original input.
inline Tensor dense(const Tensor& t) { return t.detach().contiguous(); }

}  // namespace titan::ops
