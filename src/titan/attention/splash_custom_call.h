#pragma once
// Splash attention's CPU kernels (splash_kernel.h) as custom calls of a compiled program
// (graph/pjrt/ffi.h): graph mode on a CPU plugin runs titan's tiles instead of XLA's lowering of
// them, which is the slow part of a CPU graph step. The mask rule travels as the call's attributes
// (MaskTerms: causal, a window, a chunking) and, for packed documents, the step's ids as an
// operand; the handler builds the BlockMask from them on every call.
#include <optional>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/attention/scores.h"
#include "titan/graph/ir/program.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::attention {

// Registers the forward and backward targets with `plugin` (idempotent; needs its FFI extension).
void register_splash_calls(const graph::pjrt::Plugin& plugin);

// What both calls carry besides the arrays. The mask is the BlockMask's rule as terms, with its
// tile sizes; terms.document_ids is read as a value of the program being captured.
struct SplashCallSpec {
  MaskTerms terms = {};
  int64_t block_q = {}, block_kv = {};
  Scores scores = {};  // the cap travels only when set, so programs without one read as before
  bool bf16_products = false;
};

// The spec for `mask`, or nullopt where the custom calls cannot express it (a rule outside
// MaskTerms) or the kernel cannot take `dtype` (it takes f32 and f64): those keep the pure
// StableHLO lowering.
std::optional<SplashCallSpec> splash_call_spec(const BlockMask& mask, DType dtype, const Scores& scores,
                                               bool bf16_products);

// q [B, S, Hq, D], k and v [B, S, Hkv, D] -> {out [B, S, Hq, D], lse [B, Hq, S]}, as splash_forward.
std::vector<graph::Value> splash_forward_call(const SplashCallSpec& spec, const graph::Value& q,
                                              const graph::Value& k, const graph::Value& v);

// -> {dq, dk, dv} of attention whose forward gave out and lse, for dout, as splash_backward.
std::vector<graph::Value> splash_backward_call(const SplashCallSpec& spec, const graph::Value& q,
                                               const graph::Value& k, const graph::Value& v,
                                               const graph::Value& out, const graph::Value& lse,
                                               const graph::Value& dout);

}  // namespace titan::attention
