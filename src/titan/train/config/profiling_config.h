#pragma once
// The [profiling] section: traces and memory snapshots of chosen training steps.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct ProfilingConfig {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";
  int64_t profile_freq = 10;
  bool enable_memory_snapshot = false;
  std::string save_memory_snapshot_folder = "memory_snapshot";
};

void declare_keys(config::Keys<ProfilingConfig>& keys);

}  // namespace titan::train
