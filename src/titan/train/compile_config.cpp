#include "titan/train/compile_config.h"

namespace titan::train {

void declare_keys(config::Keys<CompileConfig>& keys) {
  keys.add("enable", &CompileConfig::enable, {}, "run the step in `mode`; false: eager, op by op with fused kernels")
      .add("mode", &CompileConfig::mode, config::one_of({"graph"}),
           "graph: the whole step captured once, compiled and replayed");
}

}  // namespace titan::train
