#pragma once
// The [moe] section: load balancing and capacity of mixture-of-experts layers.
#include <string>

#include "titan/core/config_schema.h"

namespace titan::nn::moe {

struct MoeConfig {
  // The load-balancing loss's coefficient (0: none) and scope ("per_layer" | "global").
  double aux_loss_coeff = 0.001;
  std::string load_balance_loss = "per_layer";
  // The auxiliary-loss-free expert bias, with its step per optimizer step.
  bool load_balance_bias = false;
  double bias_update_rate = 0.001;
  // Rows per expert: capacity_factor * tokens * top_k / experts, pairs past it dropped; 0: no cap.
  double capacity_factor = 0;

  bool operator==(const MoeConfig&) const = default;
};

void declare_keys(config::Keys<MoeConfig>& keys);

}  // namespace titan::nn::moe
