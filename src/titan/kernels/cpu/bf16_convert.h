#pragma once
// float32 -> bf16 rounding of whole rows: the cast of every operand of a bf16 matrix product
// (mixed precision), so it runs on vectors. Same result as titan::bf16(float) element by element:
// round to nearest even, NaN kept a NaN, denormals kept (VCVTNEPS2BF16 would flush them to zero,
// which is why it is not used).
#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::kernels::cpu {

void floats_to_bf16(const float* src, bf16* dst, int64_t n);

}  // namespace titan::kernels::cpu
