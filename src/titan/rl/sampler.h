#pragma once
// Picking the next token from a row of logits: greedy, or a draw at a temperature from the most
// likely tokens (top-k, then top-p / nucleus), as Hugging Face's generate applies them. Draws come
// from titan's Philox stream, so a seed fixes the whole generation on any machine.
#include <cstdint>
#include <utility>
#include <vector>

#include "titan/core/rng.h"
#include "titan/core/tensor.h"

namespace titan::rl {

struct SamplingOptions {
  double temperature = 1.0;  // divides the logits; 0: greedy (the most likely token, no draw)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // then the fewest most likely whose probability sums to >= top_p; 1: all
  uint64_t seed = 0;         // the Philox stream draws come from
};

// Throws, naming the option, on a negative or non-finite temperature, top_k < 0 or top_p outside
// (0, 1].
void validate(const SamplingOptions& opts);

// log softmax(logits / temperature)[token] over the whole row, in double: the probability a draw at
// that temperature gives the token before top-k or top-p cut the vocabulary. Temperature 0 (greedy)
// is taken as 1. What GRPO's rollouts record of each token they draw.
double log_prob(const Tensor& logits, int64_t token, double temperature);

class Sampler {
 public:
  // Checks `opts` (validate).
  explicit Sampler(const SamplingOptions& opts);

  // What sample() draws from for `logits` [vocab] (any floating dtype): the tokens it may return
  // with their probabilities (summing to 1, none zero), most likely first when top-k or top-p cut
  // the vocabulary, else by id. Greedy: the most likely token alone (the first of equals).
  // Throws on NaN or +inf logits; -inf marks a token that is never drawn.
  std::vector<std::pair<int64_t, double>> distribution(const Tensor& logits) const;
  // One token from distribution(logits); draw n of this sampler uses element n of the seed's
  // stream.
  int64_t sample(const Tensor& logits);

  const SamplingOptions& options() const { return opts_; }

 private:
  SamplingOptions opts_;
  Generator gen_;
};

}  // namespace titan::rl
