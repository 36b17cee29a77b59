#include "titan/train/config/compile_config.h"

namespace titan::train {

void declare_keys(config::Keys<CompileConfig>& keys) {
  keys.add("enable", &CompileConfig::enable, {},
           "graph mode: the whole step captured once as StableHLO, compiled by a PJRT plugin and replayed; "
           "false: eager, op by op with fused kernels")
      .add("plugin", &CompileConfig::plugin, {},
           "graph mode's PJRT plugin: cpu, cuda, tpu, or the path of a plugin .so")
      .add("plugin_options", &CompileConfig::plugin_options, {},
           "the plugin's client options as name=value pairs separated by commas, e.g. cpu_device_count=1")
      .add("xla_options", &CompileConfig::xla_options, {},
           "XLA's options for every compilation, name=value pairs separated by commas, e.g. "
           "xla_cpu_prefer_vector_width=512 (as JAX's compiler_options; the plugin refuses a name it does not know)")
      .add("scan_layers", &CompileConfig::scan_layers, {},
           "graph mode: identical blocks lowered once as a loop (compile time independent of depth; what it keeps "
           "for backward follows [activation_checkpoint]); false: every block recorded")
      .add("custom_kernels", &CompileConfig::custom_kernels, {},
           "graph mode on a CPU plugin with the FFI extension: titan's splash attention kernels run as custom "
           "calls inside the program; false: XLA's lowering of every op")
      .add("cudnn_attention", &CompileConfig::cudnn_attention, {},
           "graph mode on a CUDA plugin: attention as cuDNN's flash-attention custom calls where cuDNN takes the "
           "case (bf16, causal, sliding-window or no mask, head dim up to 256); false: XLA's lowering");
}

void check_graph_keys(const CompileConfig& c, bool graph_decoder, config::Problems& problems) {
  if (c.graph()) return;
  const std::string fix = "set compile.enable = true (or grpo.generator = \"graph\") or leave it out";
  if (!c.scan_layers)
    problems.add("compile.scan_layers = false is read only by graph mode's training step; set compile.enable = true or "
                 "leave it out");
  if (graph_decoder) return;
  if (!c.custom_kernels) problems.add("compile.custom_kernels = false is read only in graph mode; " + fix);
  if (!c.cudnn_attention) problems.add("compile.cudnn_attention = false is read only in graph mode; " + fix);
  if (c.plugin != "cpu") problems.add("compile.plugin = \"" + c.plugin + "\" is read only in graph mode; " + fix);
  if (!c.plugin_options.empty()) problems.add("compile.plugin_options is read only in graph mode; " + fix);
  if (!c.xla_options.empty()) problems.add("compile.xla_options is read only in graph mode; " + fix);
}

}  // namespace titan::train
