#pragma once
// What the trainer and the generator see of any decoder-only language model (Llama 3, Qwen 3, HF
// decoders).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/models/kv_cache.h"
#include "titan/nn/module.h"

namespace titan::models {

// Named figures for the metrics line and files (the train/ logger's Scalars).
using NamedScalars = std::vector<std::pair<std::string, double>>;

class CausalLM : public nn::Module {
 public:
  // tokens [batch, seq] (i64) -> logits [batch, seq, vocab].
  virtual Tensor operator()(const Tensor& tokens) = 0;
  virtual int64_t vocab_size() const = 0;

  // The auxiliary loss of the last forward (MoE load balancing), already weighted by its
  // coefficient: a 0-d tensor to add to the training loss, whose gradient reaches the parameters
  // that made it. Undefined for a model without one.
  virtual Tensor auxiliary_loss() { return Tensor(); }
  // Called once after every optimizer step: applies updates that are not gradient steps (MoE's
  // auxiliary-loss-free expert bias), returns figures about the step's forwards for the metrics
  // (MoE expert load) and starts collecting the next step's.
  virtual NamedScalars end_step() { return {}; }

  // Positions the model can attend over (the size of its position table).
  virtual int64_t max_seq_len() const = 0;

  // Inference over a cache: tokens [batch, S] at positions [cache.length(), cache.length() + S)
  // -> their logits [batch, S, vocab]. Each layer appends the tokens' keys and values to `cache`,
  // which then advances by S. Runs without autograd, as the cache is written in place; the logits
  // are those of operator() on the whole sequence at these positions, up to rounding.
  virtual Tensor forward_cached(const Tensor& tokens, KVCache& cache) = 0;
};

}  // namespace titan::models
