#pragma once
// XLA's CUDA plugin finds most of NVIDIA's libraries through its RUNPATH
// ($ORIGIN/../../nvidia/cu13/lib), but some are opened later by soname from inside other libraries:
// cuDNN compiles its attention kernels with NVRTC (libnvrtc.so.13, which opens its builtins), and
// cuDNN's own folder is another wheel's. JAX preloads them from the wheels before it loads the
// plugin (jax_plugins/cuda/__init__.py); titan, with no Python, does the same here, so that
// `compile.plugin = "cuda"` needs no LD_LIBRARY_PATH.
#include <string>
#include <vector>

namespace titan::graph::pjrt {

// The NVIDIA libraries of the wheels laid out beside `plugin_path` (<site>/nvidia/<wheel>/lib
// with the plugin at <site>/jax_plugins/<name>/<plugin>.so), opened RTLD_GLOBAL so that a later
// dlopen by soname finds them: NVRTC and its builtins, the CUDA runtime, cuBLAS(Lt), cuDNN, cuFFT,
// cuSOLVER, cuSPARSE, CUPTI, nvJitLink, NCCL. Returns the paths opened; none when there is no such
// folder. A library that fails to open is skipped (the plugin reports what it then misses).
std::vector<std::string> preload_nvidia_libraries(const std::string& plugin_path);

}  // namespace titan::graph::pjrt
