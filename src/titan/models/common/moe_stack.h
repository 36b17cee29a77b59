#pragma once
// What a decoder whose blocks hold mixture-of-experts layers does around them, shared by the
// families that have such blocks (qwen3_moe, the hf family's Mixtral): a pass per forward that the
// layers report into, the load-balancing loss of the last forward, the step's expert load, and the
// records graph mode carries out of a captured step.
#include <memory>
#include <vector>

#include "titan/models/causal_lm.h"
#include "titan/nn/moe/load_balance.h"
#include "titan/nn/moe/moe.h"

namespace titan::models::common {

class MoeStack {
 public:
  // Each block's `moe` (null for a dense block), in order: what the constructor takes.
  template <class Block>
  static std::vector<nn::moe::MoE*> layers_of(nn::ModuleList<Block>& blocks) {
    std::vector<nn::moe::MoE*> out;
    for (const auto& block : blocks) out.push_back(block->moe.get());
    return out;
  }

  // `layers[i]`: block i's MoE layer, null for a dense block. The loss's coefficient weighs
  // `balance` (the mean over the MoE layers of theirs, or one over all of them); 0 computes none.
  // `capped`: the layers drop tokens over a capacity, so end_step reports the drops.
  MoeStack(std::vector<nn::moe::MoE*> layers, double aux_loss_coeff, nn::moe::LoadBalanceLoss balance,
           bool capped);

  bool empty() const { return moe_layers_ == 0; }
  // A pass for one forward (null without MoE layers); `inference` adds no loss. The last training
  // pass is the one auxiliary_loss reads.
  std::shared_ptr<nn::moe::MoEPass> new_pass(bool inference);
  // What a block's MoE layer (null: a dense block, which reports nothing) reports out of a
  // graph-mode loop's body, and gives back to each block (common::run_blocks' take and give).
  static std::vector<Tensor> take_loop_reports(nn::moe::MoE* moe, const std::shared_ptr<nn::moe::MoEPass>& pass);
  static void give_loop_reports(nn::moe::MoE* moe, const std::shared_ptr<nn::moe::MoEPass>& pass,
                                std::vector<Tensor> reports);

  // CausalLM's methods of the same names.
  Tensor auxiliary_loss() const;
  NamedScalars end_step();
  std::vector<Tensor> take_step_records();
  void put_step_records(std::vector<Tensor> records);

 private:
  std::vector<nn::moe::MoE*> layers_;
  int64_t moe_layers_ = 0;
  double aux_loss_coeff_;
  nn::moe::LoadBalanceLoss balance_;
  bool capped_;
  std::shared_ptr<nn::moe::MoEPass> last_pass_;
  std::vector<size_t> records_per_layer_;  // what take_step_records took from each layer
};

}  // namespace titan::models::common
