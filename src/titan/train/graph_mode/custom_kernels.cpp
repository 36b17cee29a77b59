#include "titan/train/graph_mode/custom_kernels.h"

#include "titan/attention/decode.h"
#include "titan/attention/splash_custom_call.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/ops/custom_calls.h"

namespace titan::train {

CustomKernels enable_custom_kernels(const graph::Runner& runner, bool wanted, int64_t devices) {
  if (!wanted) return {.on = false, .note = "off (compile.custom_kernels = false): XLA's lowerings only"};
  if (devices > 1)
    return {.on = false,
            .note = "none over " + std::to_string(devices) +
                    " devices: XLA's SPMD partitioner cannot split a custom call, so the sharded step takes "
                    "XLA's lowerings"};
  const graph::pjrt::Client& client = runner.client();
  if (runner.platform() != graph::Program::Platform::cpu)
    return {.on = false,
            .note = "none: titan's kernels are CPU code and the plugin's platform is " +
                    client.platform_name() + "; XLA's lowerings only"};
  const std::string why = graph::pjrt::ffi::unsupported_reason(client.plugin());
  if (!why.empty()) return {.on = false, .note = "none, falling back to XLA's lowerings: " + why};
  attention::register_splash_calls(client.plugin());
  attention::register_decode_call(client.plugin());
  ops::register_custom_calls(client.plugin());
  return {.on = true,
          .note =
              "splash attention forward and backward (mask rules outside causal, window, chunk and "
              "documents keep XLA's lowering), decoding attention over the KV cache, RMSNorm, LayerNorm and SwiGLU forward and backward, linear layers' GEMMs, MoE "
              "experts' grouped GEMMs and row moves"};
}

}  // namespace titan::train
