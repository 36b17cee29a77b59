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
  // log_prob of each new token under the sampling temperature (1 when greedy), over the ids it
  // was drawn from (GenerateOptions::vocab_size).
  std::vector<double> logprobs;
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

// How generate() runs a model: over a prompt that starts a sequence, then over one token at a
// time after it, each time giving the logits of the last token fed, [vocab] f32 on the host.
// Eager titan (EagerDecoder) and graph mode (graph_decoder.h) are two; the sampling loop is one.
class Decoder {
 public:
  explicit Decoder(models::CausalLM& model) : model_(model) {}
  virtual ~Decoder() = default;
  models::CausalLM& model() const { return model_; }
  // Starts a sequence with `prompt`, which, with the tokens decode() feeds after it, is to take
  // at most `max_len` positions (<= the model's max_seq_len).
  virtual Tensor prefill(std::span<const int64_t> prompt, int64_t max_len) = 0;
  // Feeds `token` at the sequence's next position.
  virtual Tensor decode(int64_t token) = 0;

 private:
  models::CausalLM& model_;
};

// The model's own forward over a host KVCache.
class EagerDecoder : public Decoder {
 public:
  using Decoder::Decoder;
  Tensor prefill(std::span<const int64_t> prompt, int64_t max_len) override;
  Tensor decode(int64_t token) override;

 private:
  std::optional<models::KVCache> cache_;
};

// Continues `prompt` (token ids of one sequence, at most the model's max_seq_len). Deterministic
// for a given model, prompt and options (the seed among them); decoders that compute the same
// logits give the same tokens. The model's products run in the precision of the AutocastGuard
// around the call (core/autocast.h), float32 outside one.
GenerateResult generate(Decoder& decoder, std::span<const int64_t> prompt, const GenerateOptions& opts);
// generate() with an EagerDecoder.
GenerateResult generate(models::CausalLM& model, std::span<const int64_t> prompt,
                        const GenerateOptions& opts);

// Continuations of several prompts of one length, row r continuing prompts[r] with its own
// seeds[r] (opts.sampling.seed is ignored), drawn together: every forward runs all rows over a
// KVCache of that batch, so a step of GRPO's rollouts multiplies [rows, dim] matrices where
// generate() multiplies vectors. A row that has stopped is fed its last token again while the
// others go on; its result is as it stopped. Each row's tokens are generate()'s with its seed, but
// for rounding differences of batched products.
std::vector<GenerateResult> generate_rows(models::CausalLM& model, std::span<const std::span<const int64_t>> prompts,
                                          std::span<const uint64_t> seeds, const GenerateOptions& opts);

}  // namespace titan::rl
