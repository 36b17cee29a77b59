#pragma once
// A Qwen 3 small enough to gradcheck, shared by the model's tests and the load-balancing loss's.
#include <cstdint>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/models/qwen3/model.h"

namespace titan::test {

// `n_layers` blocks, 4 query heads over 2 kv heads of size 4 on a 6-wide stream (head_dim not
// dim / n_heads), vocabulary 11, context 8; with `moe`, 4 experts of which 2 per token and an
// auxiliary-loss coefficient of 0.5.
models::qwen3::ModelArgs tiny_qwen3_args(bool moe, int64_t n_layers = 2);

// `ids` as `batch` rows.
Tensor tokens_of(const std::vector<int64_t>& ids, int64_t batch);

// Weights larger than the init's, so that the routers' choices are uneven and every path carries
// a gradient well above the finite differences' noise.
void randomise(models::qwen3::Transformer& m, uint64_t seed);

}  // namespace titan::test
