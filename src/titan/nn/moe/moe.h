#pragma once
// A mixture-of-experts feed-forward (token choice, no shared expert, as Qwen 3's): route each
// token to its top-k experts -> dispatch (tokens grouped by expert) -> one grouped GEMM per
// expert projection -> combine (unpermute, weighted by the routing scores). Load balancing by an
// auxiliary loss, by a per-expert bias on the choice (auxiliary-loss-free), or both.
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "titan/nn/auxiliary_loss.h"
#include "titan/nn/moe/experts.h"
#include "titan/nn/moe/load_balance.h"
#include "titan/nn/moe/router.h"
#include "titan/nn/moe/token_dispatcher.h"

namespace titan::nn::moe {

struct MoEArgs {
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t hidden_dim = 256;        // each expert's SwiGLU hidden size
  bool norm_topk_prob = true;      // renormalise the k chosen scores to sum to 1
  bool load_balance_bias = false;  // the auxiliary-loss-free expert bias
  double bias_update_rate = 1e-3;  // its step per optimizer step (DeepSeek-V3's gamma)
  // > 0: every expert computes on capacity_factor * tokens * k / experts rows and drops the pairs
  // past them (CapacityTokenDispatcher); 0: no cap, no pair dropped.
  double capacity_factor = 0;

  // Throws, naming the field, when the sizes cannot make a layer.
  void validate() const;
};

// What one forward pass of a model shares with its MoE layers; the model makes one per pass and
// hands it to every layer.
struct MoEPass {
  nn::AuxiliaryLosses aux_losses;
  // The load-balancing loss's weight. per_layer: each layer's loss counts with it (the coefficient
  // over the number of MoE layers, so that the total is the coefficient times the layers' mean);
  // global: the one loss does. 0: none computed.
  double aux_loss_weight = 0;
  LoadBalanceLoss load_balance_loss = LoadBalanceLoss::per_layer;
  // The layers' choices, which the global loss pools.
  std::shared_ptr<PooledChoices> pooled_choices = std::make_shared<PooledChoices>();
  // Layers that have run in this pass: one re-run by activation checkpointing counts no tokens.
  std::set<int64_t> layers_run;
};

class MoE : public Module {
 public:
  // `layer_id` keys this layer's reports in a pass; `init_std` is the depth-scaled std of the
  // router and of the experts' w2 and w3.
  MoE(int64_t layer_id, int64_t dim, const MoEArgs& args, double init_std, TensorOptions opts = {});

  // x [..., dim] -> [..., dim]. In training mode the tokens each expert got are added to this
  // step's counts (end_step takes them). With pass.aux_loss_weight > 0 this layer's part of the
  // load-balancing loss (see load_balance.h; pass.load_balance_loss chooses which) is attached to
  // the output through pass.aux_losses, so its gradient reaches the router even when the block is
  // checkpointed.
  Tensor forward(const Tensor& x, MoEPass& pass);
  // The pass is shared (captured by value), so a wrapper that re-runs the body in backward
  // (activation checkpointing) reports into the same pass.
  Tensor operator()(const Tensor& x, const std::shared_ptr<MoEPass>& pass) {
    TITAN_CHECK(pass != nullptr, "moe::MoE: called without an MoEPass; make one per model forward");
    return run_forward(x, [this, pass](const Tensor& in) { return forward(in, *pass); });
  }

  // The tokens each expert got since the last call, in training-mode forwards, passed through
  // count_reducer first; applies the expert-bias update from them when the bias is on, and
  // starts counting afresh.
  std::vector<int64_t> end_step();
  // The (token, choice) pairs over their expert's capacity that the step end_step closed dropped.
  int64_t dropped() const { return dropped_; }

  // What each training-mode forward since the last end_step recorded for it: its tokens per expert
  // ([experts] i64) and dropped pairs (0-d i64), as tensors of wherever the forward ran. Graph
  // mode takes them out of the captured step as results of its program (take_records) and gives
  // each run's back (put_records: host tensors, as take_records returned them), so that end_step
  // reads them as in eager mode.
  std::vector<Tensor> take_records();
  void put_records(std::vector<Tensor> records);

  // Graph mode's layer loop (autograd/scan.h) runs the first layer's code for every layer inside
  // its body. take_loop_reports, on that layer, removes what its forward reported into `pass` and
  // its records (values of the body); give_loop_reports, on layer i, puts layer i's there (rows of
  // the loop's stacks of them), as if layer i had run, so that its records, expert loads and
  // load-balancing loss are read after the loop as after layers run one by one.
  std::vector<Tensor> take_loop_reports(MoEPass& pass);
  void give_loop_reports(MoEPass& pass, std::vector<Tensor> reports);
  // Replaceable: makes this process's counts the step's global ones in place (a sum over the
  // ranks that routed other tokens), so that every rank updates the bias alike. Unset: local.
  std::function<void(std::vector<int64_t>&)> count_reducer = nullptr;

  std::shared_ptr<TopKRouter> router;
  std::shared_ptr<GroupedExperts> experts;
  // Replaceable: expert parallelism swaps in its all-to-all dispatcher.
  std::shared_ptr<TokenDispatcher> dispatcher;

 private:
  int64_t layer_id_;
  MoEArgs args_;
  std::vector<Tensor> records_;  // pairs of (tokens per expert, dropped), one per forward
  int64_t dropped_ = 0;
};

// How evenly the tokens of a step spread over the experts, from each layer's tokens per expert.
struct ExpertLoad {
  int64_t min = 0, max = 0;  // the fewest and most tokens any expert of any layer got
  double cv = 0;             // coefficient of variation (std / mean) over a layer's experts, mean over layers
};
ExpertLoad expert_load(const std::vector<std::vector<int64_t>>& tokens_per_expert_by_layer);

}  // namespace titan::nn::moe
