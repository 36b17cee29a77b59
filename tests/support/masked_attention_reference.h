#pragma once
// Masked attention in f64 with the [S, S] scores materialised: the reference splash attention's
// tests check it against. Here rather than in the test so that it keeps the build's optimisation
// while the test files are built at a lower level (tests/CMakeLists.txt).
#include <cstdint>
#include <functional>
#include <optional>

#include "titan/core/tensor.h"

namespace titan::test {

// Whether query q of batch row b sees key k: each rule's definition, written independently of
// the library's.
using Visible = std::function<bool(int64_t b, int64_t q, int64_t k)>;

struct AttentionGrads {
  Tensor out, dq, dk, dv;  // f64
};

// softmax(s + mask) v per (b, h) of q [B, S, Hq, D] over k, v [B, S, Hkv, D], and the gradients
// of sum(out * dout); s = scale q k^T, or softcap * tanh(scale q k^T / softcap) with a softcap.
AttentionGrads masked_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& dout, const Visible& visible, double scale,
                                          std::optional<double> softcap = std::nullopt);

}  // namespace titan::test
