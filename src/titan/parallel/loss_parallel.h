#pragma once
// Cross-entropy over a vocabulary split across a group ("loss parallel"): each rank holds the
// logits of vocabulary ids [vocab_offset, vocab_offset + V_local) and the loss is computed
// without gathering them. Per row, three numbers cross the group instead of the vocabulary: the
// largest local logsumexp, the sum of the shifted local sums, and the target's logit (from the
// rank that holds it).
#include <cstdint>

#include "titan/core/tensor.h"
#include "titan/dist/process_group.h"

namespace titan::parallel {

// The mean (over rows whose target is not ignore_index) of logsumexp(logits) - logits[target]
// over the whole vocabulary, the same value on every rank of `group`: what ops::cross_entropy
// gives on the gathered logits. logits [..., V_local] (f32 or f64), targets [...] (i32 or i64,
// global ids). Backward gives each rank the gradient of its own logits; every rank must run it.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_offset,
                                    int64_t vocab_size, dist::ProcessGroup group,
                                    int64_t ignore_index = -100);

}  // namespace titan::parallel
