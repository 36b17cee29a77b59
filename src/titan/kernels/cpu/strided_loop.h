#pragma once
// Iteration over N operands that share a logical shape but have their own strides (broadcast
// operands have stride 0). Dims are collapsed where every operand is contiguous across them, so
// the common cases (all contiguous, scalar broadcast, row broadcast) become one long inner loop.
#include <array>
#include <cstdint>

#include "titan/core/parallel.h"
#include "titan/core/shape.h"

namespace titan::kernels::cpu {

template <size_t N>
struct StridedLoop {
  Shape sizes;                     // collapsed; innermost last
  std::array<Shape, N> strides;    // per operand, in elements

  StridedLoop(const Shape& shape, const std::array<Shape, N>& operand_strides) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      bool merge = !sizes.empty();
      for (size_t k = 0; k < N && merge; ++k)
        merge = strides[k].back() == operand_strides[k][d] * shape[d];
      if (merge) {
        sizes.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) strides[k].back() = operand_strides[k][d];
      } else {
        sizes.push_back(shape[d]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(operand_strides[k][d]);
      }
    }
    if (sizes.empty()) {
      sizes.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  int64_t inner() const { return sizes.back(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < sizes.size(); ++d) r *= sizes[d];
    return r;
  }
  std::array<int64_t, N> inner_strides() const {
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = strides[k].back();
    return s;
  }

  // f(offsets, n, inner_strides) once per innermost row, rows split across threads.
  template <typename F>
  void run(const F& f) const {
    const int64_t n = inner(), nrows = rows();
    const auto is = inner_strides();
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1));
    parallel_for(0, nrows, grain, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        std::array<int64_t, N> off{};
        int64_t rem = r;
        for (size_t d = sizes.size() - 1; d-- > 0;) {
          int64_t i = rem % sizes[d];
          rem /= sizes[d];
          for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
        }
        f(off, n, is);
      }
    });
  }
};

}  // namespace titan::kernels::cpu
