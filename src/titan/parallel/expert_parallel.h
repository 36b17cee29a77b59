#pragma once
// Expert parallelism over the mesh's ep ranks (GShard's, as TorchTitan applies it): rank r of ep
// holds experts [r E/ep, (r+1) E/ep) of every MoE layer, and the layer's token dispatch becomes
// an exchange between the ep ranks. The ep ranks are dp_shard ranks (dist/parallel_dims.h): each
// reads its own micro-batches, FSDP shards everything outside the experts over all of dp_shard,
// and the experts over efsdp (the dp_shard ranks that hold the same experts).
//
// One layer's dispatch (AllToAllTokenDispatcher):
//   sort the (token, choice) pairs by expert -> rows grouped by destination rank, as the experts
//   of a rank are contiguous -> exchange the per-(source, local expert) counts -> all-to-all-v of
//   the rows (its backward the reverse all-to-all-v) -> regroup the received rows from (source,
//   expert) order to (expert, source) order for the grouped GEMMs.
// combine runs the inverse path, then unpermutes with the routing weights. Each all-to-all waits
// at once: none of it is hidden under computation.
//
// Gradients: backward's all-to-all brings every ep rank's tokens' gradients to the experts, so an
// expert's gradient is the sum over the ep ranks' losses; FSDP averages it over efsdp, and the
// objective is the mean over all of dp_shard, so it is scaled by 1/ep on top. FSDP's average over
// dp_shard is already right for the parameters outside the experts.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/dist/process_group.h"
#include "titan/nn/moe/moe.h"
#include "titan/nn/moe/token_dispatcher.h"
#include "titan/parallel/parameter_slices.h"

namespace titan::parallel {

class AllToAllTokenDispatcher final : public nn::moe::TokenDispatcher {
 public:
  // This rank holds experts [rank * local_experts, (rank + 1) * local_experts) of `group`.
  AllToAllTokenDispatcher(dist::ProcessGroup group, int64_t local_experts);
  Dispatched dispatch(const Tensor& x, const Tensor& ids, int64_t num_experts) override;
  Tensor combine(const Tensor& expert_out, const Tensor& weights, const Dispatched& dispatched) override;

 private:
  dist::ProcessGroup group_;
  int64_t local_experts_;
};

class ExpertParallel final : public ParameterSlices {
 public:
  explicit ExpertParallel(dist::ProcessGroup group);

  // Narrows moe's experts (w1, w2, w3 on dim 0) in place to this rank's and gives the layer the
  // all-to-all dispatcher. On the meta model, before deferred initialisation and FSDP.
  void apply(nn::moe::MoE& moe);

  // Whether the parameter named `name` is one of the experts' (split over ep).
  bool is_expert(const std::string& name) const { return slices_.contains(name); }
  std::optional<GlobalSlice> slice_of(const std::string& name) const override;
  const dist::ProcessGroup& slice_group() const override { return group_; }
  dist::ProcessGroup& group() { return group_; }

  // After the step's backward and FSDP's reduction, on the optimizer's tensors by parameter name:
  // the experts' gradients scaled by 1/ep.
  void scale_expert_gradients(const std::vector<std::pair<std::string, Tensor>>& named);
  // Parameters outside the experts are not the same on every ep rank (FSDP shards them over
  // dp_shard, which holds the ep ranks), so each rank saves its own.
  bool replicates_the_rest() const override { return false; }

 private:
  dist::ProcessGroup group_;
  std::map<std::string, GlobalSlice> slices_;
};

}  // namespace titan::parallel
