#pragma once
// Text generation with a KV cache: the prompt runs through the model once (prefill), then each
// sampled token is fed back alone, attending over the cached keys and values of all before it
// (decode), until eos, max_new_tokens, or the end of the model's context.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "titan/models/causal_lm.h"
#include "titan/rl/sampler.h"

namespace titan::rl {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> eos_ids = {};  // stop once one is sampled (it ends the new tokens)
  // Sample among ids [0, vocab_size) only: a tokenizer's, when the model's vocabulary is padded
  // beyond it. 0: the model's whole vocabulary.
  int64_t vocab_size = 0;
  SamplingOptions sampling = {};
};

// Throws on max_new_tokens < 1, a vocab_size < 0, or bad sampling options (naming the option).
void validate(const GenerateOptions& opts);

enum class StopReason { eos, max_new_tokens, context_full };
// The enumerator's name ("context_full"), as tools that read titan generate's output expect it.
const char* stop_reason_name(StopReason r);

struct GenerateResult {
  std::vector<int64_t> tokens;  // the new tokens, without the prompt
  StopReason stop = StopReason::max_new_tokens;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the forward over the prompt
  double decode_seconds = 0;   // the rest: every sample, and the forward of each token fed back
  double prefill_tokens_per_second() const { return per_second(prompt_tokens, prefill_seconds); }
  double decode_tokens_per_second() const {
    return per_second(static_cast<int64_t>(tokens.size()), decode_seconds);
  }

 private:
  static double per_second(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }
};

// Continues `prompt` (token ids of one sequence, at most model.max_seq_len()). Deterministic for
// a given model, prompt and options (the seed among them).
GenerateResult generate(models::CausalLM& model, std::span<const int64_t> prompt,
                        const GenerateOptions& opts);

}  // namespace titan::rl
