#pragma once
// The oneDNN CPU engine and a stream per thread, shared by the kernels that run oneDNN primitives
// (onednn_matmul.cpp, onednn_conv2d.cpp).
#include <oneapi/dnnl/dnnl.hpp>

namespace titan::kernels::cpu {

dnnl::engine& onednn_engine();
// The calling thread's stream: one per thread, not one per primitive run.
dnnl::stream& onednn_stream();

}  // namespace titan::kernels::cpu
