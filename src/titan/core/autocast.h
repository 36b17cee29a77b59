#pragma once
// Mixed precision for the ops that multiply matrices: linear, matmul, the grouped expert GEMMs and
// splash attention's tiles. Under AutocastGuard(kBF16) they multiply bf16 copies of their float32
// operands with float32 accumulation and return float32, and keep the bf16 copies for their
// backward, which multiplies in bf16 too. Everything else (norms, softmax statistics, losses,
// residual sums, optimizer) stays float32, as PyTorch's autocast keeps it.
//
// The state is per thread and read when an op runs forward; its backward follows what the
// forward did, whatever the state is when backward runs.
#include "titan/core/dtype.h"

namespace titan {

// kBF16 inside an AutocastGuard(kBF16), kF32 otherwise.
DType autocast_dtype();

// The dtype a float32 operand of a matrix product is multiplied in: bf16 under autocast, its own
// dtype otherwise (f64 operands are never narrowed).
inline DType matmul_operand_dtype(DType operand) {
  return operand == kF32 ? autocast_dtype() : operand;
}

class AutocastGuard {
 public:
  // kF32 turns autocast off (inside an outer guard too); kBF16 turns it on.
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
};

}  // namespace titan
