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
  // tokens [batch, seq] (i64) -> logits [batch, seq, vocab]. With document_ids [batch, seq] (a
  // packed batch's, data::Batch::document_ids), a token attends only to its own document.
  virtual Tensor operator()(const Tensor& tokens, const Tensor& document_ids) = 0;
  Tensor operator()(const Tensor& tokens) { return (*this)(tokens, Tensor()); }
  virtual int64_t vocab_size() const = 0;

  // Pipeline parallelism runs the model as stages of consecutive layers. forward_layers runs
  // layers [first, last) of the forward on token ids [batch, seq] (which fix the mask and
  // positions): from the embedding when first == 0, else from `hidden`, the hidden states the stage
  // before returned (under sequence parallelism, this rank's part of the sequence); when last ==
  // num_layers() the final norm and output run after them and it returns logits, else hidden
  // states. forward_layers(tokens, ids, {}, 0, num_layers()) is operator(). A stage touches only
  // the modules of its span, so the others may hold no values on its rank.
  virtual int64_t num_layers() const = 0;
  // The width of the hidden states between layers.
  virtual int64_t hidden_size() const = 0;
  virtual Tensor forward_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden,
                                int64_t first, int64_t last) = 0;
  // forward_layers through this module's forward hooks (what a data-parallel plan installs on the
  // root runs around every stage's forward), which see the stage's input: the tokens or `hidden`.
  Tensor run_layers(const Tensor& tokens, const Tensor& document_ids, const Tensor& hidden, int64_t first,
                    int64_t last) {
    return run_forward(first == 0 ? tokens : hidden, [this, tokens, document_ids, first, last](const Tensor& in) {
      return first == 0 ? forward_layers(in, document_ids, Tensor(), first, last)
                        : forward_layers(tokens, document_ids, in, first, last);
    });
  }

  // The auxiliary loss of the last forward (MoE load balancing), already weighted by its
  // coefficient: a 0-d tensor to add to the training loss, whose gradient reaches the parameters
  // that made it. Undefined for a model without one.
  virtual Tensor auxiliary_loss() { return Tensor(); }
  // Called once after every optimizer step: applies updates that are not gradient steps (MoE's
  // auxiliary-loss-free expert bias), returns figures about the step's forwards for the metrics
  // (MoE expert load) and starts collecting the next step's.
  virtual NamedScalars end_step() { return {}; }
  // What the step's training forwards recorded for end_step (MoE: tokens per expert, pairs
  // dropped), taken out of the model. Graph mode, whose forwards are captured once, returns them
  // as results of its program and gives each run's back, host tensors in the same order, before
  // calling end_step.
  virtual std::vector<Tensor> take_step_records() { return {}; }
  virtual void put_step_records(std::vector<Tensor> records) {
    TITAN_CHECK(records.empty(), "CausalLM::put_step_records: ", records.size(),
                " records for a model that takes none");
  }

  // Positions the model can attend over (the size of its position table).
  virtual int64_t max_seq_len() const = 0;

  // Inference over a cache: tokens [batch, S] at positions [cache.position(), + S)
  // -> their logits [batch, S, vocab]. Each layer appends the tokens' keys and values to `cache`,
  // which then advances by S. Runs without autograd, as the cache is written in place; the logits
  // are those of operator() on the whole sequence at these positions, up to rounding.
  virtual Tensor forward_cached(const Tensor& tokens, KVCache& cache) = 0;
};

}  // namespace titan::models
