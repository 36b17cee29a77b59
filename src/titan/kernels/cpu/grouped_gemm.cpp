#include "titan/kernels/cpu/grouped_gemm.h"

#include <vector>

#include "titan/core/trace.h"
#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

namespace {

// The GEMM of every group (call_of(g, row_start) describes it), run as gemm_concurrent decides.
template <typename T, typename F>
void for_each_group(const char* name, const int64_t* group_rows, int64_t groups, const F& call_of) {
  std::vector<GemmCall<T>> calls;
  calls.reserve(static_cast<size_t>(groups));
  for (int64_t g = 0, row = 0; g < groups; row += group_rows[g++]) calls.push_back(call_of(g, row));
  trace::Span span(name, "gemm");
  if (span.active()) {
    int64_t flops = 0;
    for (const GemmCall<T>& c : calls) flops += 2 * c.m * c.n * c.k;
    span.arg("groups", groups).arg("flops", flops);
  }
  gemm_concurrent<T>(calls);
}

}  // namespace

// The groups' row counts change from call to call: one oneDNN primitive per layout serves them all
// (Varying), where one per count would be made nearly every call.
template <typename T>
void grouped_gemm(const int64_t* group_rows, int64_t groups, int64_t n, int64_t k, const T* x, const T* w,
                  bool trans_w, gemm_acc_t<T>* y, bool accumulate) {
  using Acc = gemm_acc_t<T>;
  const Acc beta = accumulate ? Acc(1) : Acc(0);
  const int64_t ldw = trans_w ? k : n;
  for_each_group<T>("grouped_gemm", group_rows, groups, [&](int64_t g, int64_t row) {
    return GemmCall<T>{false, trans_w,       group_rows[g], n,    k,           Acc(1), x + row * k,
                       k,     w + g * n * k, ldw,           beta, y + row * n, n,      Varying::m};
  });
}

template <typename T>
void grouped_gemm_tn(const int64_t* group_rows, int64_t groups, int64_t m, int64_t n, const T* a, const T* b,
                     gemm_acc_t<T>* dw) {
  using Acc = gemm_acc_t<T>;
  // k = 0 (an empty group) makes gemm write zeros.
  for_each_group<T>("grouped_gemm_tn", group_rows, groups, [&](int64_t g, int64_t row) {
    return GemmCall<T>{true, false,       m, n,      group_rows[g],  Acc(1), a + row * m,
                       m,    b + row * n, n, Acc(0), dw + g * m * n, n,      Varying::k};
  });
}

#define TITAN_GROUPED_GEMM_INSTANTIATE(T)                                                            \
  template void grouped_gemm<T>(const int64_t*, int64_t, int64_t, int64_t, const T*, const T*, bool, \
                                gemm_acc_t<T>*, bool);                                               \
  template void grouped_gemm_tn<T>(const int64_t*, int64_t, int64_t, int64_t, const T*, const T*,    \
                                   gemm_acc_t<T>*);
TITAN_GROUPED_GEMM_INSTANTIATE(float)
TITAN_GROUPED_GEMM_INSTANTIATE(double)
TITAN_GROUPED_GEMM_INSTANTIATE(bf16)

}  // namespace titan::kernels::cpu
