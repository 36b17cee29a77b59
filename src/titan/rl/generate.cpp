#include "titan/rl/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "titan/core/autocast.h"
#include "titan/core/stopwatch.h"

namespace titan::rl {

namespace {

// The logits of the last position of logits [1, S, vocab].
Tensor last_row(const Tensor& logits) {
  return logits.narrow(1, logits.size(1) - 1, 1).view({logits.size(2)});
}

}  // namespace

void validate(const GenerateOptions& opts) {
  TITAN_CHECK(opts.max_new_tokens >= 1, "generate: max_new_tokens = ", opts.max_new_tokens,
              " must be at least 1");
  TITAN_CHECK(opts.vocab_size >= 0, "generate: vocab_size = ", opts.vocab_size,
              " must be >= 0 (0: the model's whole vocabulary)");
  validate(opts.sampling);
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::max_new_tokens: return "max_new_tokens";
    case StopReason::context_full: return "context_full";
  }
  return "?";
}

Tensor EagerDecoder::prefill(std::span<const int64_t> prompt, int64_t max_len) {
  cache_.emplace(1, max_len);
  const auto P = static_cast<int64_t>(prompt.size());
  return last_row(model().forward_cached(
      Tensor::from_vector(std::vector<int64_t>(prompt.begin(), prompt.end()), {1, P}), *cache_));
}

Tensor EagerDecoder::decode(int64_t token) {
  TITAN_CHECK(cache_.has_value(), "EagerDecoder::decode: no sequence was started; call prefill first");
  return last_row(model().forward_cached(Tensor::from_vector(std::vector<int64_t>{token}, {1, 1}), *cache_));
}

GenerateResult generate(Decoder& decoder, std::span<const int64_t> prompt, const GenerateOptions& opts) {
  models::CausalLM& model = decoder.model();
  const int64_t P = static_cast<int64_t>(prompt.size()), context = model.max_seq_len();
  TITAN_CHECK(P >= 1, "generate: the prompt is empty; give it at least one token (a bos)");
  TITAN_CHECK(P <= context, "generate: the prompt has ", P, " tokens, more than the model's context of ",
              context, " (its max_seq_len); shorten the prompt");
  validate(opts);
  TITAN_CHECK(opts.vocab_size <= model.vocab_size(), "generate: vocab_size = ", opts.vocab_size,
              " is larger than the model's vocabulary of ", model.vocab_size(), " ids");
  const int64_t vocab = opts.vocab_size > 0 ? opts.vocab_size : model.vocab_size();
  Sampler sampler(opts.sampling);
  // Under bf16 autocast, each weight is converted once for the whole generation, not per token.
  const AutocastCastCache weights_in_bf16;

  GenerateResult r;
  r.prompt_tokens = P;
  // The last new token is never fed back, so the cache needs one position less than the sequence;
  // the context bounds it (P <= context, so no sum below overflows whatever max_new_tokens is).
  const int64_t max_len = P + std::min(opts.max_new_tokens - 1, context - P);
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = decoder.prefill(prompt, max_len);
  r.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int64_t length = P;; ++length) {
    const Tensor row = logits.narrow(0, 0, vocab);
    const int64_t token = sampler.sample(row);
    r.tokens.push_back(token);
    r.logprobs.push_back(log_prob(row, token, opts.sampling.temperature));
    if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), token) != opts.eos_ids.end()) {
      r.stop = StopReason::eos;
      break;
    }
    if (static_cast<int64_t>(r.tokens.size()) == opts.max_new_tokens) {
      r.stop = StopReason::max_new_tokens;
      break;
    }
    if (length == context) {
      r.stop = StopReason::context_full;
      break;
    }
    logits = decoder.decode(token);
  }
  r.decode_seconds = seconds_since(t0);
  return r;
}

std::vector<GenerateResult> generate_rows(models::CausalLM& model, std::span<const std::span<const int64_t>> prompts,
                                          std::span<const uint64_t> seeds, const GenerateOptions& opts) {
  const auto n = static_cast<int64_t>(prompts.size());
  TITAN_CHECK(n >= 1 && seeds.size() == prompts.size(), "generate_rows: ", prompts.size(), " prompts and ",
              seeds.size(), " seeds; give one seed per prompt, and at least one");
  const int64_t P = static_cast<int64_t>(prompts[0].size()), context = model.max_seq_len();
  TITAN_CHECK(P >= 1 && P <= context, "generate_rows: the prompts have ", P, " tokens; they need 1 to ", context,
              " (the model's max_seq_len)");
  for (std::span<const int64_t> p : prompts)
    TITAN_CHECK(static_cast<int64_t>(p.size()) == P, "generate_rows: prompts of ", P, " and ", p.size(),
                " tokens; rows drawn together start at one length");
  validate(opts);
  TITAN_CHECK(opts.vocab_size <= model.vocab_size(), "generate_rows: vocab_size = ", opts.vocab_size,
              " is larger than the model's vocabulary of ", model.vocab_size(), " ids");
  const int64_t vocab = opts.vocab_size > 0 ? opts.vocab_size : model.vocab_size();
  std::vector<Sampler> samplers;
  for (uint64_t seed : seeds) {
    SamplingOptions o = opts.sampling;
    o.seed = seed;
    samplers.emplace_back(o);
  }
  const AutocastCastCache weights_in_bf16;
  std::vector<GenerateResult> results(static_cast<size_t>(n));
  const int64_t max_len = P + std::min(opts.max_new_tokens - 1, context - P);
  models::KVCache cache(n, max_len);
  std::vector<int64_t> fed;
  fed.reserve(static_cast<size_t>(n * P));
  for (std::span<const int64_t> p : prompts) fed.insert(fed.end(), p.begin(), p.end());
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model.forward_cached(Tensor::from_vector(fed, {n, P}), cache);
  const double prefill = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::vector<bool> done(static_cast<size_t>(n), false);
  int64_t running = n;
  for (int64_t length = P;; ++length) {
    const Tensor last = logits.narrow(1, logits.size(1) - 1, 1).view({n, logits.size(2)});
    fed.assign(static_cast<size_t>(n), 0);
    for (int64_t r = 0; r < n; ++r) {
      GenerateResult& res = results[static_cast<size_t>(r)];
      if (done[static_cast<size_t>(r)]) {
        fed[static_cast<size_t>(r)] = res.tokens.back();
        continue;
      }
      const Tensor row = last.narrow(0, r, 1).view({last.size(1)}).narrow(0, 0, vocab);
      const int64_t token = samplers[static_cast<size_t>(r)].sample(row);
      res.tokens.push_back(token);
      res.logprobs.push_back(log_prob(row, token, opts.sampling.temperature));
      fed[static_cast<size_t>(r)] = token;
      std::optional<StopReason> stop;
      if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), token) != opts.eos_ids.end())
        stop = StopReason::eos;
      else if (static_cast<int64_t>(res.tokens.size()) == opts.max_new_tokens)
        stop = StopReason::max_new_tokens;
      else if (length == context)
        stop = StopReason::context_full;
      if (stop) {
        res.stop = *stop;
        done[static_cast<size_t>(r)] = true;
        --running;
      }
    }
    if (running == 0) break;
    logits = model.forward_cached(Tensor::from_vector(fed, {n, 1}), cache);
  }
  const double decode = seconds_since(t0);
  for (GenerateResult& r : results) {
    r.prompt_tokens = P;
    r.prefill_seconds = prefill;
    r.decode_seconds = decode;
  }
  return results;
}

GenerateResult generate(models::CausalLM& model, std::span<const int64_t> prompt, const GenerateOptions& opts) {
  EagerDecoder decoder(model);
  return generate(decoder, prompt, opts);
}

}  // namespace titan::rl
