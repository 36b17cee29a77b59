#include "titan/core/dtype.h"

namespace titan {

size_t dtype_size(DType t) {
  switch (t) {
    case kF32: return 4;
    case kF64: return 8;
    case kBF16: return 2;
    case kI32: return 4;
    case kI64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case kF32: return "f32";
    case kF64: return "f64";
    case kBF16: return "bf16";
    case kI32: return "i32";
    case kI64: return "i64";
  }
  return "?";
}

}  // namespace titan
