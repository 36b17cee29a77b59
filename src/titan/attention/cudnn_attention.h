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
#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"

namespace titan::attention {

inline constexpr char kCudnnForward[] = "__cudnn$fmhaSoftmax";
inline constexpr char kCudnnBackward[] = "__cudnn$fmhaSoftmaxBackward";
// The largest head dim cuDNN's flash attention takes on Hopper (cuDNN 9.5 and later; 128 before).
inline constexpr int64_t kCudnnMaxHeadDim = 256;

// What the calls are told besides the arrays: the mask as cuDNN's band below the diagonal, and
// packed documents as segments of each row.
struct CudnnCallSpec {
  bool causal = false;         // key k visible to query q only where k <= q
  int64_t window = 0;          // with causal: only the `window` keys q - window < k <= q; 0: no bound
  double scale = 1.0;          // of q k^T
  // Above 1: each row packs up to this many documents (cuDNN's max_seg_per_batch), which attend
  // only within themselves; the calls then take their lengths and offsets (CudnnSegments).
  int64_t documents = 1;
};

// The spec for attention over `mask` with heads of `head_dim`, or why cuDNN cannot take it.
// `dtype` is q's; attention in f32 products (not bf16 ones) stays with XLA, as cuDNN's flash
// kernels take bf16 and f16 only. `max_documents` bounds the documents a row holds, for a mask with
// document ids (Program::max_documents); 0: unknown, and such a mask stays with XLA.
struct CudnnFit {
  std::optional<CudnnCallSpec> spec = std::nullopt;
  std::string why_not = {};
};
CudnnFit cudnn_fit(const BlockMask& mask, DType dtype, bool bf16_products, const Scores& scores, int64_t head_dim,
                   int64_t max_documents = 0);

// Packed documents as cuDNN's ragged layout takes them, i32, computed inside the program from the
// step's document ids [B, T] (the loader's: each row numbers its documents up by one from its
// first token's, data/loader.h): the length of every document of the batch, in order and left
// packed ([B, M], 0 after the last), and where each starts ([B, M + 1], counted in elements of
// the BTNH tensor over the whole batch: a token's stride is heads x head dim; the total after the
// last). M = spec.documents. q's offsets step by Hq x D and k's and v's by Hkv x D: JAX
// (fused_attention_stablehlo.py's _fix_seqlen_offsets) scales both by the query heads, which is
// a kv token's stride only without grouped queries.
struct CudnnSegments {
  graph::Value q_seqlen = {}, kv_seqlen = {}, q_offsets = {}, kv_offsets = {};
};
CudnnSegments cudnn_segments(const graph::Value& document_ids, int64_t documents, int64_t q_heads,
                             int64_t kv_heads, int64_t head_dim);
// Whether the offsets of B x T tokens of `heads` heads of `head_dim` stay within the i32 cuDNN
// reads them in (the larger of q's and k's heads decides); attention past it keeps XLA's lowering.
bool cudnn_offsets_fit(int64_t B, int64_t T, int64_t heads, int64_t head_dim);

// The most documents a row of `document_ids` [B, T] holds, where every row numbers its documents
// as the loader does (consecutive tokens share an id, and each new one is one more than the last);
// nullopt for ids of another form, which cuDNN's segments cannot describe.
std::optional<int64_t> packed_documents_per_row(const Tensor& document_ids);

// The backend_config of a forward (or backward) call over batch B, Hq query heads, T queries and S
// keys: JSON of XLA's GpuBackendConfig with its cudnn_fmha_backend_config.
std::string cudnn_backend_config(const CudnnCallSpec& spec, int64_t B, int64_t Hq, int64_t T, int64_t S,
                                 bool backward);

// q [B, T, Hq, D], k and v [B, S, Hkv, D], all bf16 -> out [B, T, Hq, D] bf16 and the softmax
// statistics [B x spec.documents, Hq, T] f32 that the backward reads. `segments` are required
// when spec.documents > 1, and carried to the backward.
struct CudnnForward {
  graph::Value out = {}, stats = {};
  CudnnSegments segments = {};
};
CudnnForward cudnn_forward_call(const CudnnCallSpec& spec, const graph::Value& q, const graph::Value& k,
                                const graph::Value& v, const CudnnSegments& segments = {});
// -> {dq, dk, dv} (bf16, shaped as q, k, v) for dout [B, T, Hq, D] bf16, of attention whose forward
// gave `fwd`.
std::vector<graph::Value> cudnn_backward_call(const CudnnCallSpec& spec, const graph::Value& q, const graph::Value& k,
                                              const graph::Value& v, const CudnnForward& fwd,
                                              const graph::Value& dout);

}  // namespace titan::attention
