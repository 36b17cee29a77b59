#include "titan/nn/moe/moe_config.h"

namespace titan::nn::moe {

void declare_keys(config::Keys<MoeConfig>& keys) {
  using C = MoeConfig;
  keys.add("aux_loss_coeff", &C::aux_loss_coeff, config::non_negative(),
           "weight of the load-balancing loss added to the training loss; 0: none")
      .add("load_balance_loss", &C::load_balance_loss, config::one_of({"per_layer", "global"}),
           "per_layer: the mean of each MoE layer's Switch loss (1 when balanced); global: one loss over "
           "the tokens of all layers pooled, transformers' load_balancing_loss_func (top_k when balanced)")
      .add("load_balance_bias", &C::load_balance_bias, {},
           "auxiliary-loss-free balancing: a per-expert bias on the routing choice, nudged after every step "
           "towards an even load")
      .add("bias_update_rate", &C::bias_update_rate, config::non_negative(), "the bias's step per optimizer step")
      .add("capacity_factor", &C::capacity_factor, config::non_negative(),
           "> 0: each expert computes on capacity_factor * tokens * top_k / experts rows and the (token, choice) "
           "pairs past them are dropped (counted per layer as moe/dropped); 0: no cap, nothing dropped. Graph mode "
           "gives every expert fixed rows whatever the factor (0: room for every token)");
}

}  // namespace titan::nn::moe
