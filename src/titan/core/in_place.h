#pragma once
// Replacing what a tensor handle holds, in place: a plan that gives a rank its part of a
// parameter or table (tensor, pipeline, context parallelism) changes the TensorImpl that the
// module's member and its registry entry share, so the model's code sees the part without knowing.
#include <cstdint>

#include "titan/core/tensor.h"

namespace titan {

// Makes `handle` a view of `values`' storage, with its sizes and strides.
void rebind_in_place(const Tensor& handle, const Tensor& values);

// Narrows `handle` to [start, start + length) along `dim`: a meta handle stays meta, of the
// narrowed shape (deferred initialisation fills it later); a real one holds a contiguous copy of
// that slice, so the rest of the values can be freed.
void narrow_in_place(const Tensor& handle, int64_t dim, int64_t start, int64_t length);

}  // namespace titan
