#pragma once
// The [compile] section: how the training step runs.
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct CompileConfig {
  // Graph mode, the one compiled mode (TorchTitan's key; titan's former compile.mode is retired).
  bool enable = false;
  // Graph mode's PJRT plugin: "cpu", "cuda", "tpu", or the path of a plugin's .so.
  std::string plugin = "cpu";
  // The plugin's client options, "name=value" pairs separated by commas (e.g.
  // "cpu_device_count=1"): integers, true/false, decimals, or else strings.
  std::string plugin_options = "";
  // XLA's options for every compilation, "name=value" items separated by commas (e.g.
  // "xla_cpu_prefer_vector_width=512"), passed as JAX's compiler_options passes them
  // (graph::parse_xla_options); they win over titan's defaults.
  std::string xla_options = "";
  // Identical transformer blocks lowered once, as a loop over their stacked weights
  // (autograd/scan.h): compile time independent of depth; what the loop keeps for backward
  // follows [activation_checkpoint] (train::scan_saves_for).
  bool scan_layers = true;
  // titan's CPU kernels (splash attention) as custom calls inside the program, on a CPU plugin
  // with the FFI extension; false: XLA's lowering of every op (to compare the two).
  bool custom_kernels = true;
  // On a CUDA plugin, attention as cuDNN's flash-attention custom calls where cuDNN takes the case
  // (bf16, causal or sliding-window or no mask, head dim up to 256); false: XLA's lowering, to
  // compare the two or where cuDNN fails on a machine (attention/attention_choice.h).
  bool cudnn_attention = true;
  // What the step runs as: graph when enabled, else eager (op by op, with titan's fused kernels).
  std::string execution_mode() const { return enable ? "graph" : "eager"; }
  bool graph() const { return enable; }
};

// Refuses the keys only graph mode reads when nothing runs in graph mode: neither the training
// step (enable) nor, with `graph_decoder`, GRPO's rollouts.
void check_graph_keys(const CompileConfig& c, bool graph_decoder, config::Problems& problems);

void declare_keys(config::Keys<CompileConfig>& keys);

}  // namespace titan::train
