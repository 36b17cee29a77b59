#pragma once
// Mixed precision for the ops that multiply matrices: linear, matmul, the grouped expert GEMMs and
// splash attention's tiles. Under AutocastGuard(kBF16) they multiply bf16 copies of their float32
// operands with float32 accumulation and return float32, and keep the bf16 copies for their
// backward, which multiplies in bf16 too. Everything else (norms, softmax statistics, losses,
// residual sums, optimizer) stays float32, as PyTorch's autocast keeps it.
//
// The state is per thread and read when an op runs forward; its backward follows what the
// forward did, whatever the state is when backward runs.
#include <map>
#include <utility>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"

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

// Copies of parameters (leaf tensors that require grad, on the host) in another dtype, made once
// per parameter and dtype: what an open AutocastCastCache reuses. Each parameter is held, so that
// its address is not reused by another.
class AutocastCasts {
 public:
  size_t size() const { return copies_.size(); }
  int64_t bytes() const;  // of the copies
  void clear() { copies_.clear(); }

 private:
  friend Tensor autocast_cast(const Tensor& x, DType dtype);
  std::map<std::pair<const TensorImpl*, DType>, std::pair<Tensor, Tensor>> copies_;
};

// While one is open on this thread, the copies that products make of parameters in another dtype
// come from its AutocastCasts: a decoding step multiplies every weight by one token, and
// converting the weight costs more than that product. PyTorch's autocast caches the same casts.
// The copies must not outlive writes to the parameters (an optimizer step), which they would not
// see: rl::generate opens one with copies of its own for one generation, and a frozen model's
// owner keeps its copies across calls (train/flux's text encoders, whose weights would otherwise
// be converted on every call).
class AutocastCastCache {
 public:
  // Copies of its own, dropped when it closes.
  AutocastCastCache();
  // `casts`, which the caller keeps across scopes.
  explicit AutocastCastCache(AutocastCasts& casts);
  ~AutocastCastCache();
  AutocastCastCache(const AutocastCastCache&) = delete;
  AutocastCastCache& operator=(const AutocastCastCache&) = delete;
  size_t size() const { return casts_->size(); }

 private:
  friend Tensor autocast_cast(const Tensor& x, DType dtype);
  AutocastCasts own_;
  AutocastCasts* casts_;
  AutocastCastCache* previous_;
};

// x, detached, as `dtype`: through the open AutocastCastCache for a parameter, else converted.
Tensor autocast_cast(const Tensor& x, DType dtype);

}  // namespace titan
