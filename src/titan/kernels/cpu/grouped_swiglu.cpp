#include "titan/kernels/cpu/grouped_swiglu.h"

#include <numeric>
#include <type_traits>
#include <vector>

#include "titan/kernels/cpu/activation.h"
#include "titan/kernels/cpu/bf16_convert.h"
#include "titan/kernels/cpu/grouped_gemm.h"

namespace titan::kernels::cpu {

template <typename T>
void grouped_swiglu_fwd(const int64_t* group_rows, int64_t groups, int64_t hidden, int64_t in, const T* x,
                        const T* w1, const T* w3, gemm_acc_t<T>* gate, gemm_acc_t<T>* up, gemm_acc_t<T>* h) {
  const int64_t rows = std::accumulate(group_rows, group_rows + groups, int64_t{0});
  grouped_gemm<T>(group_rows, groups, hidden, in, x, w1, true, gate);
  grouped_gemm<T>(group_rows, groups, hidden, in, x, w3, true, up);
  swiglu_fwd<gemm_acc_t<T>>(gate, up, h, rows * hidden);
}

template <typename T>
void grouped_swiglu_bwd(const int64_t* group_rows, int64_t groups, int64_t hidden, int64_t in,
                        const gemm_acc_t<T>* dh, const gemm_acc_t<T>* gate, const gemm_acc_t<T>* up, const T* x,
                        const T* w1, const T* w3, gemm_acc_t<T>* dx, gemm_acc_t<T>* dw1, gemm_acc_t<T>* dw3) {
  using Acc = gemm_acc_t<T>;
  const int64_t rows = std::accumulate(group_rows, group_rows + groups, int64_t{0}), n = rows * hidden;
  std::vector<Acc> d_gate(static_cast<size_t>(n)), d_up(static_cast<size_t>(n));
  swiglu_bwd<Acc>(gate, up, dh, d_gate.data(), d_up.data(), n);
  // The products' operands: the gradients themselves, or their bf16 roundings.
  std::vector<T> rounded;
  const T* dg = nullptr;
  const T* du = nullptr;
  if constexpr (std::is_same_v<T, Acc>) {
    dg = d_gate.data();
    du = d_up.data();
  } else {
    rounded.resize(static_cast<size_t>(2 * n));
    floats_to_bf16(d_gate.data(), rounded.data(), n);
    floats_to_bf16(d_up.data(), rounded.data() + n, n);
    dg = rounded.data();
    du = rounded.data() + n;
  }
  if (dx) {
    grouped_gemm<T>(group_rows, groups, in, hidden, dg, w1, false, dx);
    grouped_gemm<T>(group_rows, groups, in, hidden, du, w3, false, dx, /*accumulate=*/true);
  }
  if (dw1) grouped_gemm_tn<T>(group_rows, groups, hidden, in, dg, x, dw1);
  if (dw3) grouped_gemm_tn<T>(group_rows, groups, hidden, in, du, x, dw3);
}

#define TITAN_GROUPED_SWIGLU_INSTANTIATE(T)                                                                  \
  template void grouped_swiglu_fwd<T>(const int64_t*, int64_t, int64_t, int64_t, const T*, const T*, const T*, \
                                      gemm_acc_t<T>*, gemm_acc_t<T>*, gemm_acc_t<T>*);                         \
  template void grouped_swiglu_bwd<T>(const int64_t*, int64_t, int64_t, int64_t, const gemm_acc_t<T>*,        \
                                      const gemm_acc_t<T>*, const gemm_acc_t<T>*, const T*, const T*,          \
                                      const T*, gemm_acc_t<T>*, gemm_acc_t<T>*, gemm_acc_t<T>*);
TITAN_GROUPED_SWIGLU_INSTANTIATE(float)
TITAN_GROUPED_SWIGLU_INSTANTIATE(double)
TITAN_GROUPED_SWIGLU_INSTANTIATE(bf16)

}  // namespace titan::kernels::cpu
