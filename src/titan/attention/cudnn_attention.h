#pragma once
// Attention in a program that XLA's CUDA plugin compiles, as the plugin's own cuDNN flash-attention
// custom calls: forward `__cudnn$fmhaSoftmax` (out, the softmax statistics, a workspace XLA sizes)
// and backward `__cudnn$fmhaSoftmaxBackward`. XLA no longer rewrites plain attention into them
// (openxla/xla PR 22225), so the lowering writes the calls itself, in the form JAX's cuDNN
// attention writes (jax/_src/cudnn/fused_attention_stablehlo.py): q, k and v [B, T, N, H] ("BTNH"),
// the results [B, N, T, H] laid out as BTNH, and the config as JSON of XLA's GpuBackendConfig.
// These targets are not on XLA's list of stable custom calls: the plugin titan runs is pinned
// (scripts/gpu_check.sh), and tests/unit/test_cudnn_attention.cpp holds the text titan writes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/attention/scores.h"
#include "titan/graph/ir/program.h"

namespace titan::attention {

inline constexpr char kCudnnForward[] = "__cudnn$fmhaSoftmax";
inline constexpr char kCudnnBackward[] = "__cudnn$fmhaSoftmaxBackward";
// The largest head dim cuDNN's flash attention takes on Hopper (cuDNN 9.5 and later; 128 before).
inline constexpr int64_t kCudnnMaxHeadDim = 256;

// What the calls are told besides the arrays: the mask as cuDNN's band below the diagonal.
struct CudnnCallSpec {
  bool causal = false;         // key k visible to query q only where k <= q
  int64_t window = 0;          // with causal: only the `window` keys q - window < k <= q; 0: no bound
  double scale = 1.0;          // of q k^T
};

// The spec for attention over `mask` with heads of `head_dim`, or why cuDNN cannot take it.
// `dtype` is q's; attention in f32 products (not bf16 ones) stays with XLA, as cuDNN's flash
// kernels take bf16 and f16 only.
struct CudnnFit {
  std::optional<CudnnCallSpec> spec = std::nullopt;
  std::string why_not = {};
};
CudnnFit cudnn_fit(const BlockMask& mask, DType dtype, bool bf16_products, const Scores& scores, int64_t head_dim);

// The backend_config of a forward (or backward) call over batch B, Hq query heads, T queries and S
// keys: JSON of XLA's GpuBackendConfig with its cudnn_fmha_backend_config.
std::string cudnn_backend_config(const CudnnCallSpec& spec, int64_t B, int64_t Hq, int64_t T, int64_t S,
                                 bool backward);

// q [B, T, Hq, D], k and v [B, S, Hkv, D], all bf16 -> out [B, T, Hq, D] bf16 and the softmax
// statistics [B, Hq, T] f32 that the backward reads.
struct CudnnForward {
  graph::Value out = {}, stats = {};
};
CudnnForward cudnn_forward_call(const CudnnCallSpec& spec, const graph::Value& q, const graph::Value& k,
                                const graph::Value& v);
// -> {dq, dk, dv} (bf16, shaped as q, k, v) for dout [B, T, Hq, D] bf16, of attention whose forward
// gave `fwd`.
std::vector<graph::Value> cudnn_backward_call(const CudnnCallSpec& spec, const graph::Value& q, const graph::Value& k,
                                              const graph::Value& v, const CudnnForward& fwd,
                                              const graph::Value& dout);

}  // namespace titan::attention
