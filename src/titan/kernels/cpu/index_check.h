#pragma once
// Validation of integer index tensors (embedding ids, cross-entropy targets, later MoE routes),
// done before any parallel region so that a bad index is an error, never a wild read.
#include <cstdint>
#include <optional>

#include "titan/core/tensor.h"

namespace titan::kernels::cpu {

// Throws a titan::Error naming `op`, the first entry of the i32/i64 tensor `idx` outside
// [0, hi), its position in idx and the valid range; entries equal to `skip` are allowed.
// `what` names the entries in the message ("id", "target").
void check_index_range(const char* op, const char* what, const Tensor& idx, int64_t hi,
                       std::optional<int64_t> skip = std::nullopt);

}  // namespace titan::kernels::cpu
