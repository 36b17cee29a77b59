#pragma once
// Token routing of a mixture-of-experts layer on contiguous buffers: each token's top-k experts,
// the permutation that groups the (token, choice) pairs by expert, and the row moves between token
// order and expert order. The expert GEMMs over those groups are in grouped_gemm.h.
//
// A pair (t, j) is token t's j-th choice; pairs are numbered t * k + j. "Rows" are the pairs in
// expert order: experts ascending and, within an expert, tokens ascending.
#include <cstdint>

namespace titan::kernels::cpu {

// ids[t, j]: token t's j-th best expert by scores[t, :] + bias (bias [experts], may be null),
// best first; equal values go to the lower expert index, so the choice is deterministic.
// weights[t, j] = scores[t, ids[t, j]]: the bias only chooses, it never weighs. k <= experts.
template <typename T>
void topk_experts(const T* scores, const T* bias, int64_t tokens, int64_t experts, int64_t k, int64_t* ids,
                  T* weights);
// The backward of the weights' gather: d_scores[t, ids[t, j]] = d_weights[t, j], zero elsewhere.
template <typename T>
void topk_experts_bwd(const T* d_weights, const int64_t* ids, int64_t tokens, int64_t experts, int64_t k,
                      T* d_scores);

// Groups the tokens * k pairs by expert (a stable counting sort): counts[e] = pairs routed to e;
// row_of[t * k + j] = the row of pair (t, j); token_of_row[r] = the token of row r. ids must be
// in [0, experts).
void sort_by_expert(const int64_t* ids, int64_t tokens, int64_t k, int64_t experts, int64_t* counts,
                    int64_t* row_of, int64_t* token_of_row);

// The pairs in slots of `capacity` per expert (ops::expert_slots): token_of_slot
// [experts * capacity], slot_of_pair and kept [tokens * k]; returns the pairs dropped. ids must be
// in [0, experts).
int64_t expert_slots(const int64_t* ids, int64_t tokens, int64_t k, int64_t experts, int64_t capacity,
                     int64_t* token_of_slot, int64_t* slot_of_pair, float* kept);

// dst[r, :] = src[index[r], :] for r in [0, rows); rows of width d.
template <typename T>
void gather_rows(const T* src, const int64_t* index, int64_t rows, int64_t d, T* dst);

// dst[t, :] = sum_j w[t, j] * src[row_of[t * k + j], :] (w null: every weight 1). Summed per
// token in choice order: no atomics, the same bits at any thread count.
template <typename T>
void combine_rows(const T* src, const int64_t* row_of, const T* w, int64_t tokens, int64_t k, int64_t d,
                  T* dst);
// The backward of combine_rows with weights: d_src[row_of[t * k + j], :] = w[t, j] * d_dst[t, :]
// and d_w[t, j] = <d_dst[t, :], src[row_of[t * k + j], :]>. Either output may be null.
template <typename T>
void combine_rows_bwd(const T* d_dst, const T* src, const int64_t* row_of, const T* w, int64_t tokens,
                      int64_t k, int64_t d, T* d_src, T* d_w);

}  // namespace titan::kernels::cpu
