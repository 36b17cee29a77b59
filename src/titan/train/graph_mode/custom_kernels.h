#pragma once
// Which of titan's CPU kernels a graph-mode program calls as custom calls (graph/pjrt/ffi.h)
// rather than as XLA's lowering of them: splash attention's, RMSNorm's and SwiGLU's forward and backward,
// linear layers' products (titan's GEMM: in bf16 oneDNN's, ops/linalg.cpp has the figures), and a
// dropless MoE layer's grouped expert products (whose group sizes are data, which no XLA op takes
// on the CPU without computing every expert over every row) and its row moves into expert order
// and back (ops/moe.cpp has the figures), on a plugin whose platform is the
// CPU and which has the FFI extension. Every other plugin (CUDA,
// TPU, a CPU plugin without the extension) gets the pure StableHLO lowerings, whose text names no
// CPU-only target. Measured on the CPU plugin (2 shared cores, best of 10-20 runs, three rounds):
// RMSNorm [2048, 512] forward + backward 2.0-2.4 ms as calls, 2.5-5.3 ms as XLA's fusions; the
// fused cross-entropy [2048, 8192] 108-122 ms as calls, 75-140 ms as XLA's, no faster, so the
// loss keeps XLA's lowering.
#include <cstdint>
#include <string>

#include "titan/graph/runner.h"

namespace titan::train {

struct CustomKernels {
  bool on = false;
  std::string note = {};  // for the start-up log: the kernels that run as custom calls, or why none do
};

// `wanted`: compile.custom_kernels. When it is set and `runner`'s plugin can run them, registers
// the kernels' targets with the plugin; captures then set Program::set_custom_kernels(on). A
// program split over `devices` > 1 takes none.
CustomKernels enable_custom_kernels(const graph::Runner& runner, bool wanted, int64_t devices = 1);

}  // namespace titan::train
