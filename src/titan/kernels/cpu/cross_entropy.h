#pragma once
// Fused softmax cross-entropy, target log-probabilities and entropies over logits [rows, vocab]
// (float or double, contiguous) against targets [rows] (int32_t or int64_t). The kernels trust
// the targets: each is ignore_index or in [0, vocab) (see check_index_range in embedding.h).
#include <cstdint>

namespace titan::kernels::cpu {

// A chunk is walked twice (its max, then its exponentials), so it must stay in L1 between the
// two. 4 KiB measured about 20% faster than 8-64 KiB on an AMD EPYC with a 48 KiB L1d: the
// second walk then also overlaps the prefetch of the next chunk.
inline constexpr int64_t kCrossEntropyChunkBytes = 4 * 1024;

struct CrossEntropySums {
  double loss = 0;    // sum over counted rows of lse - logit[target], in row order
  int64_t count = 0;  // rows whose target is not ignore_index
};

// Writes lse[r] = log(sum_j exp(logits[r, j] * inv_temperature)) for every row
// (inv_temperature > 0). Each logit is read from memory once: the vocabulary is walked in chunks
// of `chunk` elements, merging a running (max, sum of exponentials). A row longer than a segment
// of a few chunks is split across threads, so a handful of rows with a huge vocabulary still uses
// every core; segments depend on `chunk` only, never on the thread count, so the result is the
// same on any number of threads.
template <typename T>
void row_logsumexp(const T* logits, int64_t rows, int64_t vocab, T inv_temperature, T* lse,
                   int64_t chunk = kCrossEntropyChunkBytes / sizeof(T));

// row_logsumexp at temperature 1, then the loss summed over the rows whose target is not
// ignore_index.
template <typename T, typename I>
CrossEntropySums cross_entropy_forward(const T* logits, const I* targets, int64_t rows, int64_t vocab,
                                       int64_t ignore_index, T* lse,
                                       int64_t chunk = kCrossEntropyChunkBytes / sizeof(T));

// dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == targets[r]]) * scale in one pass over the
// logits; rows whose target is ignore_index get zeros.
template <typename T, typename I>
void cross_entropy_backward(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                            int64_t ignore_index, T scale, T* dlogits);

// Log-probabilities of the targets at a temperature: lse from row_logsumexp(inv_temperature),
// then out[r] = logits[r, targets[r]] * inv_temperature - lse[r], or 0 where the target is
// ignore_index.
template <typename T, typename I>
void token_log_probs_forward(const T* logits, const I* targets, int64_t rows, int64_t vocab,
                             int64_t ignore_index, T inv_temperature, T* lse, T* out);

// As cross_entropy_backward with a scale per row and the softmax taken at the temperature:
// dlogits[r, j] = (exp(logits[r, j] * inv_temperature - lse[r]) - [j == targets[r]]) * scale[r].
// The gradient of token_log_probs under a cotangent g is this with scale[r] = -g[r] *
// inv_temperature.
template <typename T, typename I>
void softmax_onehot_backward(const T* logits, const I* targets, const T* lse, int64_t rows, int64_t vocab,
                             int64_t ignore_index, T inv_temperature, const T* scale, T* dlogits);

// out[r] = the entropy of softmax(logits[r] * inv_temperature), given that row's lse from
// row_logsumexp: sum_j p_j * (lse[r] - z_j), every term non-negative (no cancellation however
// peaked the row); -inf logits add nothing.
template <typename T>
void row_entropy(const T* logits, const T* lse, int64_t rows, int64_t vocab, T inv_temperature, T* out);

}  // namespace titan::kernels::cpu
