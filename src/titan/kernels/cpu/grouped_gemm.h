#pragma once
// GEMMs over groups of consecutive rows with one weight matrix per group: the expert computation
// of a mixture-of-experts layer over tokens sorted by expert. Group g holds group_rows[g] rows,
// starting where group g - 1 ends; an empty group costs nothing (its weight gradient is zero).
// Row-major, contiguous operands; every group is a cblas call on its own rows only.
#include <cstdint>

#include "titan/kernels/cpu/gemm.h"

namespace titan::kernels::cpu {

// y_g = x_g @ op(w_g) for every group, or y_g += x_g @ op(w_g) with `accumulate`: x [rows, k],
// y [rows, n]; w holds `groups` matrices back to back, each [n, k] read transposed (trans_w) or
// [k, n]. bf16 operands give a float32 y (gemm_acc_t).
template <typename T>
void grouped_gemm(const int64_t* group_rows, int64_t groups, int64_t n, int64_t k, const T* x, const T* w,
                  bool trans_w, gemm_acc_t<T>* y, bool accumulate = false);

// dw_g = a_g^T @ b_g for every group: a [rows, m], b [rows, n], dw [groups, m, n] (overwritten).
// The weight gradient of grouped_gemm: with a = dy and b = x it is the [n, k] layout's.
template <typename T>
void grouped_gemm_tn(const int64_t* group_rows, int64_t groups, int64_t m, int64_t n, const T* a, const T* b,
                     gemm_acc_t<T>* dw);

}  // namespace titan::kernels::cpu
