#pragma once
// Moving routed tokens to their experts and the experts' outputs back: the one step of an MoE
// layer that expert parallelism replaces (an all-to-all over the `ep` ranks, each holding a slice
// of the experts), by giving the layer another dispatcher. The layer's code does not change.
#include <cstdint>
#include <vector>

#include "titan/ops/moe.h"

namespace titan::nn::moe {

class TokenDispatcher {
 public:
  struct Dispatched {
    Tensor rows;                           // the tokens of this process's experts, grouped by expert
    ops::GroupSizes rows_per_expert;    // the group sizes of `rows`, one per local expert
    ops::TokenPermutation permutation;     // how the local rows map back to (token, choice) pairs
    // The capacity dispatcher's layout instead of `permutation`; its `dropped` is undefined for a
    // dispatcher that drops nothing.
    ops::ExpertSlots slots = {};
    // Where the rows went, for a dispatcher that moves them between processes (empty for the
    // local one): the rows sent to and received from each rank, and the order that regrouped the
    // received rows from (source rank, expert) to (expert, source rank).
    std::vector<int64_t> send_rows = {};
    std::vector<int64_t> recv_rows = {};
    Tensor regroup = {};
  };

  virtual ~TokenDispatcher() = default;
  // x [tokens, dim] and each token's experts ids [tokens, k] -> the rows the experts compute on.
  virtual Dispatched dispatch(const Tensor& x, const Tensor& ids, int64_t num_experts) = 0;
  // The experts' outputs (rows as dispatch laid them out) -> [tokens, dim], each token the sum of
  // its k outputs times weights [tokens, k].
  virtual Tensor combine(const Tensor& expert_out, const Tensor& weights, const Dispatched& dispatched) = 0;
};

// Every expert on this process: sorting the (token, choice) pairs by expert is the whole move. In
// a captured step the group sizes are data of the step, which the experts' grouped GEMMs take as
// custom calls (ops::grouped_linear): a program without custom kernels needs the capacity layout.
class LocalTokenDispatcher final : public TokenDispatcher {
 public:
  Dispatched dispatch(const Tensor& x, const Tensor& ids, int64_t num_experts) override;
  Tensor combine(const Tensor& expert_out, const Tensor& weights, const Dispatched& dispatched) override;
};

// Every expert on this process, each computing on the same number of rows whatever its load: the
// static shapes a captured step needs (graph mode), or a cap on an expert's work. The capacity is
// capacity_factor * tokens * k / experts, rounded up, at most the tokens; a factor of 0 gives
// every expert room for every token, so that nothing is dropped, at the cost of experts / k times
// the expert products of the dropless layer. A pair past its expert's capacity is dropped: its
// token gets nothing from that expert, and Dispatched::slots.dropped counts it.
class CapacityTokenDispatcher final : public TokenDispatcher {
 public:
  explicit CapacityTokenDispatcher(double capacity_factor);
  int64_t capacity(int64_t tokens, int64_t k, int64_t num_experts) const;
  Dispatched dispatch(const Tensor& x, const Tensor& ids, int64_t num_experts) override;
  Tensor combine(const Tensor& expert_out, const Tensor& weights, const Dispatched& dispatched) override;

 private:
  double capacity_factor_;
};

}  // namespace titan::nn::moe
