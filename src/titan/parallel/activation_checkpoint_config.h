#pragma once
// The [activation_checkpoint] section: which blocks recompute their activations in backward.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::parallel {

struct ActivationCheckpointConfig {
  std::string mode = "none";              // "none" | "selective" | "full"
  std::string selective_ac_option = "2";  // TorchTitan's spelling: a layer interval, as a string

  // selective_ac_option = "op" (TorchTitan's per-op policy): keep the results of matrix products
  // and attention, recompute the rest. Only graph mode's layer loop does it (graph::ScanSaves).
  bool per_op() const { return mode == "selective" && selective_ac_option == "op"; }
  // Checkpoint every k-th block: 1 for full, selective_ac_option's k for selective.
  int64_t every_k() const;
};

void declare_keys(config::Keys<ActivationCheckpointConfig>& keys);

}  // namespace titan::parallel
