#include "titan/core/autocast.h"

#include "titan/core/error.h"

namespace titan {

namespace {
thread_local DType current = kF32;
}

DType autocast_dtype() {
  return current;
}

AutocastGuard::AutocastGuard(DType dtype) : previous_(current) {
  TITAN_CHECK(dtype == kF32 || dtype == kBF16, "AutocastGuard: expected f32 (off) or bf16, got ",
              dtype_name(dtype));
  current = dtype;
}

AutocastGuard::~AutocastGuard() {
  current = previous_;
}

}  // namespace titan
