#pragma once
#include "titan/core/tensor.h"

namespace titan::ops {

// log_softmax(logits / temperature)[target] per row: logits [..., V] (f32 or f64) and integer
// targets [...] (i32/i64) give [...] in the logits' dtype. The log-probabilities of sampled tokens
// under the policy that sampled them at that temperature, as GRPO's ratio needs. Fused as
// cross_entropy is: the forward keeps a per-row logsumexp (never a [N, V] softmax); the backward
// writes g * (onehot - softmax(logits / T)) / T in one pass. Rows whose target is ignore_index
// give 0 and receive no gradient. A target outside [0, V) that is not ignore_index, and a
// temperature that is not positive and finite, are errors naming them.
Tensor token_log_probs(const Tensor& logits, const Tensor& targets, double temperature = 1.0,
                       int64_t ignore_index = -100);

// The entropy of softmax(logits / temperature) per row: logits [..., V] give [...] in their dtype.
// A metric: it records no gradient.
Tensor token_entropy(const Tensor& logits, double temperature = 1.0);

}  // namespace titan::ops
