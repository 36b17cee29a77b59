#pragma once
// The [training] section's batch and run keys (its data keys are data::DatasetConfig's), and how
// a step's batch splits over the data-parallel ranks.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/config_schema.h"

namespace titan::train {

// What training.objective may name: causal_lm, the next token of every position of packed
// documents; sft, the completion tokens of packed prompt/completion examples ([sft]); grpo,
// GRPO post-training on [grpo]'s prompts (rl/grpo_engine.h).
std::vector<std::string> training_objectives();

struct TrainingConfig {
  std::string objective = "causal_lm";
  int64_t local_batch_size = 8;
  // -1: local_batch_size x data-parallel degree x gradient_accumulation_steps.
  int64_t global_batch_size = -1;
  // Unset: 1, or global_batch_size / (local_batch_size x data-parallel degree) when that is set.
  std::optional<int64_t> gradient_accumulation_steps = std::nullopt;
  int64_t seq_len = 2048;
  int64_t steps = 10000;
  double max_norm = 1.0;
  std::string mixed_precision_param = "float32";
  std::string mixed_precision_reduce = "float32";
  int64_t seed = 0;
  // What start-up does when the memory plan's peak exceeds the memory available (train/memory_plan.h):
  // "refuse" stops with the figures, "warn" goes ahead.
  std::string memory_check = "refuse";
};

void declare_keys(config::Keys<TrainingConfig>& keys);

// How each optimizer step's batch splits over `dp_degree` data-parallel ranks (dp_replicate x
// dp_shard once the mesh is resolved): every rank runs gradient_accumulation_steps micro-batches
// of local_batch_size.
struct BatchPlan {
  int64_t global_batch_size = 0;
  int64_t gradient_accumulation_steps = 1;
};
BatchPlan plan_batches(const TrainingConfig& t, int64_t dp_degree);

}  // namespace titan::train
