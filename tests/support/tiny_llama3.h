#pragma once
// A Llama 3 small enough to gradcheck, shared by the model's tests and those that run it another
// way (split backward, graph mode).
#include <cstdint>
#include <memory>

#include "titan/models/llama3/model.h"
#include "titan/models/llama3/model_args.h"

namespace titan::test {

// 2 layers, grouped-query attention (4 query heads over 2 kv heads of size 4) on a 16-wide
// stream, an FFN of 48, vocabulary 11.
models::llama3::ModelArgs tiny_llama3_args(int64_t max_seq_len = 8);

// The generation tests' model: grouped-query attention (4 query heads over 2 kv heads) on a
// 32-wide stream, 2 layers, 37 ids, splash tiles of 8 x 8, weights from seed 11.
std::shared_ptr<models::llama3::Transformer> generation_llama3(int64_t max_seq_len);

}  // namespace titan::test
