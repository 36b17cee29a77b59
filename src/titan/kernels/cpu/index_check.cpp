#include "titan/kernels/cpu/index_check.h"

#include <string>

namespace titan::kernels::cpu {

namespace {
template <typename I>
int64_t first_outside(const I* p, int64_t n, int64_t hi, std::optional<int64_t> skip) {
  const bool has_skip = skip.has_value();
  const int64_t s = skip.value_or(0);
  auto bad = [&](int64_t v) { return (v < 0 || v >= hi) && !(has_skip && v == s); };
  // A branch-free count first: valid input, the common case, then costs one vectorised pass.
  int64_t nbad = 0;
#pragma omp simd reduction(+ : nbad)
  for (int64_t i = 0; i < n; ++i) nbad += bad(static_cast<int64_t>(p[i])) ? 1 : 0;
  if (nbad == 0) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (bad(static_cast<int64_t>(p[i]))) return i;
  return -1;
}

std::string position_str(int64_t flat, const Shape& sizes) {
  Shape pos(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    pos[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return shape_str(pos);
}
}  // namespace

void check_index_range(const char* op, const char* what, const Tensor& idx, int64_t hi,
                       std::optional<int64_t> skip) {
  TITAN_CHECK(idx.is_contiguous() && (idx.dtype() == kI32 || idx.dtype() == kI64), op,
              ": expected a contiguous i32 or i64 tensor of ", what, "s, got ", idx.desc());
  const bool i32 = idx.dtype() == kI32;
  const int64_t at = i32 ? first_outside(idx.data<int32_t>(), idx.numel(), hi, skip)
                         : first_outside(idx.data<int64_t>(), idx.numel(), hi, skip);
  TITAN_CHECK(at < 0, op, ": ", what, " ", i32 ? idx.data<int32_t>()[at] : idx.data<int64_t>()[at],
              " at position ", position_str(at, idx.sizes()), " of ", idx.desc(),
              " is outside the valid range [0, ", hi, ")",
              skip ? " and is not the ignored value " + std::to_string(*skip) : std::string());
}

}  // namespace titan::kernels::cpu
