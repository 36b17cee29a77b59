#pragma once
// A tensor with a slice replaced, at a position that may be a value of the program being captured:
// how graph mode's KV cache takes a step's keys and values at the decoding position, an input, so
// that one program serves every position. Inference only: there is no backward.
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan::ops {

// `dst` with `src` in place of dst.narrow(dim, start, src.size(dim)); every other dim of src must
// equal dst's. `start` is a 0-d i64 tensor. On the host, a new tensor (dst is left as it is) and a
// start that does not fit is an error; in a capture, a new value of the program, whose start
// cannot be checked before it runs and is clamped into range there (XLA's dynamic_update_slice),
// so its caller keeps it in range.
Tensor update_slice(const Tensor& dst, const Tensor& src, int64_t dim, const Tensor& start);

}  // namespace titan::ops
