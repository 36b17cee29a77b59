#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

enum class Reduction { mean, sum };

// Cross-entropy of logits [..., V] against integer targets [...] (i32/i64), fused: the forward
// keeps only a per-row logsumexp (never a softmax of the whole [N, V]) and walks the vocabulary
// in chunks; the backward writes (softmax - onehot) * scale in one pass. Rows whose target is
// `ignore_index` contribute nothing; `mean` divides by the number of other rows. A target outside
// [0, V) that is not ignore_index is an error naming it.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);

}  // namespace titan::ops
