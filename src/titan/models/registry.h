#pragma once
// model.name -> TrainSpec: everything the trainer needs to know about a model family, so that
// train/ never names a model.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/core/rng.h"
#include "titan/models/causal_lm.h"

namespace titan::models {

// The [model] section as a model family sees it, with the [attention] section's keys (so that
// the family gets them with the rest).
struct ModelConfig {
  std::string name = "llama3";
  std::string flavor = "debugmodel";
  std::string attention = "splash";  // "splash" | "reference"
  int64_t vocab_size = 0;            // 0: the flavor's own; else overrides it (e.g. a tokenizer's size)
  std::optional<bool> weight_tying = std::nullopt;  // unset: the flavor's own; only families that can tie
  // [attention] block_q, block_kv: splash attention's tiles, queries x keys.
  int64_t attention_block_q = attention::kDefaultBlockQ;
  int64_t attention_block_kv = attention::kDefaultBlockKv;
  // [moe] (mixture-of-experts families): the load-balancing loss's coefficient (0: none) and the
  // auxiliary-loss-free expert bias, with its step per optimizer step.
  double moe_aux_loss_coeff = 0.001;
  bool moe_load_balance_bias = false;
  double moe_bias_update_rate = 0.001;
};

// Sizes computed from the config alone, without allocating the model (405B must work).
struct ModelSummary {
  int64_t num_params = 0;
  int64_t num_embedding_params = 0;
  // Training FLOPs per token at this sequence length: 6 * (params - embedding) for the matmuls
  // forward + backward, plus 12 * layers * dim * seq for attention scores and values (as
  // TorchTitan and the PaLM appendix count them). A mixture of experts counts only the
  // parameters a token goes through (its k experts), so that MFU stays honest.
  double flops_per_token = 0;
  std::string description;  // one line: dims, layers, heads, ...
};

// How parallelize() spreads and wraps a built model ([activation_checkpoint] and, later, the
// [parallelism] plans).
struct ParallelizeOptions {
  std::string activation_checkpoint_mode = "none";  // "none" | "full" | "selective"
  int64_t activation_checkpoint_every_k = 1;        // selective: every k-th block
};

struct TrainSpec {
  std::string name;
  std::vector<std::string> flavors;
  // Builds the model on the CPU with weights initialised from `gen` (deterministic per seed);
  // `max_seq_len` sizes position tables.
  std::function<std::shared_ptr<CausalLM>(const ModelConfig&, int64_t max_seq_len, Generator& gen)> build;
  std::function<ModelSummary(const ModelConfig&, int64_t seq_len)> summarize;
  // Applies the parallel plans to a built model, in TorchTitan's order (TP, EP, activation
  // checkpointing, compile, FSDP); the model's code does not change.
  std::function<void(CausalLM&, const ParallelizeOptions&)> parallelize;
};

void register_train_spec(TrainSpec spec);
// Registers the families that ship with titan (models/builtin.cpp). Called once, lazily, by
// get_train_spec and registered_models: self-registering static objects would be dropped by the
// linker from a static library.
void register_builtin_models();
// Errors name the unknown model and list the registered ones.
const TrainSpec& get_train_spec(const std::string& name);
std::vector<std::string> registered_models();

}  // namespace titan::models
