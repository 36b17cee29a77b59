#pragma once
// The differentiable pieces of a mixture-of-experts layer: token-choice top-k routing, the
// permutation of tokens into expert order and back, and the grouped linear map that applies one
// weight matrix per expert to its rows. Composed in nn/moe/ as route -> permute -> grouped GEMMs
// -> unpermute with the routing weights; no step ever runs an expert over all tokens.
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::ops {

struct TopKExperts {
  Tensor weights;  // [tokens, k], scores[t, ids[t, j]]: differentiable w.r.t. the scores
  Tensor ids;      // [tokens, k] i64, best first; ties go to the lower expert index
};
// Each token's k best experts by scores [tokens, experts] + bias [experts] (undefined: none).
// The bias steers the choice only (auxiliary-loss-free load balancing); the weights are the
// unbiased scores, and the choice itself has no gradient.
TopKExperts topk_experts(const Tensor& scores, int64_t k, const Tensor& bias = Tensor());

// How many of the (token, choice) pairs of ids [tokens, k] (i64 in [0, num_experts)) chose each
// expert: [num_experts] i64.
Tensor expert_counts(const Tensor& ids, int64_t num_experts);

// The pairs of a routing laid out in slots of a fixed number per expert, so that every expert's
// rows have one static shape (graph mode, or a capacity factor): slot e * capacity + c holds the
// c-th pair, in token order, that chose expert e; a pair past its expert's capacity is dropped.
// Empty slots and dropped pairs point at row 0, and pair_kept is 0 for a dropped pair.
struct ExpertSlots {
  int64_t capacity = 0;
  Tensor token_of_slot;  // [num_experts * capacity] i64
  Tensor slot_of_pair;   // [tokens * k] i64
  Tensor pair_kept;      // [tokens * k] f32: 1 for a pair in its slot, 0 for a dropped one
  Tensor dropped;        // 0-d i64: the pairs dropped
};
ExpertSlots expert_slots(const Tensor& ids, int64_t num_experts, int64_t capacity);

// The sizes of consecutive groups of rows, one group per expert. On the host where they are known
// there: eager mode, and a captured step's capacity layout (groups of one size). In a captured
// step's dropless layout they are data of the step: `counts`, an [groups] i64 value of the program.
struct GroupSizes {
  GroupSizes() = default;
  GroupSizes(std::vector<int64_t> sizes) : host(std::move(sizes)) {}  // NOLINT(google-explicit-constructor)
  GroupSizes(std::initializer_list<int64_t> sizes) : host(sizes) {}  // NOLINT(google-explicit-constructor)
  explicit GroupSizes(Tensor sizes) : counts(std::move(sizes)) {}
  std::vector<int64_t> host;
  Tensor counts;
};

// How the (token, choice) pairs of a routing are laid out in expert order ("rows": experts
// ascending, tokens ascending within one expert).
struct TokenPermutation {
  int64_t tokens = 0, top_k = 0;
  Tensor row_of;                 // [tokens * k] i64: the row of pair (t, j) = t * k + j
  Tensor token_of_row;           // [tokens * k] i64
  GroupSizes tokens_per_expert;  // the group sizes of the rows (on the host unless ids is lazy)
};
// ids [tokens, k] i64 in [0, num_experts), as topk_experts gives them. In a captured step the
// layout is a sort of the pairs by (expert, pair), its group sizes data of the step.
TokenPermutation sort_by_expert(const Tensor& ids, int64_t num_experts);

// x [tokens, d] -> [tokens * k, d]: row r is x[token_of_row[r]]. The backward sums each token's
// k row gradients.
Tensor permute_tokens(const Tensor& x, const TokenPermutation& perm);
// rows [tokens * k, d], weights [tokens, k] -> [tokens, d]: token t gets
// sum_j weights[t, j] * rows[row_of(t, j)]. Differentiable w.r.t. both.
Tensor unpermute_tokens(const Tensor& rows, const Tensor& weights, const TokenPermutation& perm);

// x [n, d] and order [n] i64, a permutation of [0, n) -> [n, d]: row i is x[order[i]]. The
// backward sends each row's gradient back to the row it came from. Expert parallelism regroups
// the rows it receives with it.
Tensor permute_rows(const Tensor& x, const Tensor& order);
// The permutation that undoes `order` ([n] i64, a permutation of [0, n)): permute_rows by it
// puts permute_rows(x, order)'s rows back where they were.
Tensor inverse_permutation(const Tensor& order);

// x [rows, in] with consecutive groups of group_rows[g] rows, weight [groups, out, in] ->
// [rows, out]: each group's rows @ weight[g]^T (nn.Linear's layout per group). One GEMM per
// group, forward and backward. In a captured step, groups of one size known on the host
// (expert_slots') are one batched product; sizes that are data of the step call titan's grouped
// GEMM kernels (ops/custom_calls.h), which needs a program with custom kernels.
Tensor grouped_linear(const Tensor& x, const Tensor& weight, const GroupSizes& group_rows);

// swiglu(grouped_linear(x, w1), grouped_linear(x, w3)): the first half of every expert's SwiGLU
// (w1 gate and w3 up, each [groups, hidden, in]) -> [rows, hidden]. One node, so that backward
// gathers x's gradient from both GEMMs in one buffer, the second accumulating onto the first,
// instead of two buffers and an add.
Tensor grouped_swiglu(const Tensor& x, const Tensor& w1, const Tensor& w3, const GroupSizes& group_rows);

}  // namespace titan::ops
