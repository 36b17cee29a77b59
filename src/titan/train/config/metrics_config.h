#pragma once
// The [metrics] section: what is logged and where.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct MetricsConfig {
  int64_t log_freq = 10;
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";
  bool enable_jsonl = true;
  bool save_for_all_ranks = false;
  bool disable_color_printing = false;
  double peak_flops = 0;  // per device, for MFU; 0: measured on this machine
};

void declare_keys(config::Keys<MetricsConfig>& keys);

}  // namespace titan::train
