#pragma once
// Attention of a few new queries over cached keys: the queries are the last Sq of Skv positions
// (one token per decoding step, or a chunk of prompt after a cached prefix), each seeing the keys
// up to its own position. Inference only, so nothing is kept for a backward; scores are
// computed per (batch, head) for a block of query rows at a time, [rows, Skv], never [Skv, Skv].
#include <cstdint>
#include <optional>

#include "titan/core/tensor.h"
#include "titan/graph/pjrt/plugin.h"

namespace titan::attention {

// The scores and the keys each query sees, as the attention the model trained with has them
// (SplashOptions, Mask::sliding_window): decoding a model trained with a window or a cap must be
// given the same, or its tokens differ from the full forward's.
struct DecodeOptions {
  std::optional<double> scale = std::nullopt;    // multiplies q k^T; unset: 1 / sqrt(head_dim)
  std::optional<double> softcap = std::nullopt;  // scores -> softcap * tanh(scores / softcap); unset: none
  // The query at position p sees keys max(0, p - window_left) .. p, as under
  // Mask::sliding_window(window_left); unset: keys 0 .. p.
  std::optional<int64_t> window_left = std::nullopt;
};

// q [B, Sq, Hq, D] at positions [Skv - Sq, Skv); k and v [B, Skv, Hkv, D] at positions
// [0, Skv) -> [B, Sq, Hq, D], contiguous. Query i, at position p = Skv - Sq + i, sees keys 0 .. p
// (causal by absolute position), or the window before p that `opts` gives. Hq must be a multiple
// of Hkv: query head h reads kv head h / (Hq / Hkv) in place (grouped-query attention). k and v
// may be views into larger buffers (a KVCache's): each position's [Hkv, D] must be dense, the
// batch stride is free. Refused when grad mode is on and an input requires grad: there is no
// backward.
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const DecodeOptions& opts = {});

// The same for queries at positions [start, start + Sq), where `start` is a 0-d i64 tensor and k
// and v hold at least start + Sq positions (a whole cache's buffers): query i sees keys 0 .. start
// + i (or the window `opts` gives), and the keys after them take no part, whatever they hold, as
// long as it is finite. On the host, k and v are cut to start + Sq and the kernel above runs. In a
// capture (graph mode's decoding step, where the position is an input) it is the kernel above as
// a custom call (`titan_decode_attention`, reading the cache's buffers in place and cutting them
// at the position it is given; `opts` travel as its attributes, each only when set) where the
// program allows custom kernels, else one masked softmax over all of k's positions per query, in
// q's dtype, as the kernel computes. The custom call checks the position against k's positions
// when it runs; the pure lowering cannot, so its caller keeps start + Sq within them.
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& start,
                        const DecodeOptions& opts = {});

// Registers the custom call above with `plugin` (idempotent; needs its FFI extension).
void register_decode_call(const graph::pjrt::Plugin& plugin);

}  // namespace titan::attention
