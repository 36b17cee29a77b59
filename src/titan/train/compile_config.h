#pragma once
// The [compile] section: how the training step runs.
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct CompileConfig {
  bool enable = false;
  std::string mode = "graph";
  // What the step runs as: `mode` when enabled, else eager (op by op, with titan's fused kernels).
  std::string execution_mode() const { return enable ? mode : "eager"; }
};

void declare_keys(config::Keys<CompileConfig>& keys);

}  // namespace titan::train
