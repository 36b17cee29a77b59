#pragma once
// The [grpo] section: GRPO post-training (training.objective = "grpo"), read by rl/grpo_engine.*.
// Defaults follow TorchTitan's experiments/rl (8 prompts x 8 samples, clip 0.2, no KL, the
// population std) where it has one, DAPO's and VeRL's names where they add to it.
#include <cstdint>
#include <string>

#include "titan/core/config_schema.h"

namespace titan::train {

struct GrpoConfig {
  // Prompts: JSONL, one {"prompt": ..., "answer": ...} per line.
  std::string prompts_path = {};
  std::string prompt_field = "prompt";
  std::string answer_field = "answer";
  int64_t prompts_per_step = 8;  // over all data-parallel ranks
  int64_t group_size = 8;        // completions drawn per prompt
  // Rollouts.
  int64_t max_new_tokens = 32;
  double temperature = 1.0;
  std::string generator = "eager";  // "graph": graph mode's decoder, through [compile]'s plugin
  int64_t max_staleness = 0;        // steps the generator's weights may lag the trainer's
  // Advantages and the loss.
  std::string advantage_norm = "std";  // none | std (population) | unbiased_std
  double clip_low = 0.2;
  double clip_high = 0.2;
  double dual_clip = 0;  // VeRL's c (> 1); 0: off
  double kl_coef = 0;    // k3 KL to a frozen copy of the starting weights; 0: no reference kept
  double log_ratio_clamp = 20;
  int64_t ppo_epochs = 1;
  int64_t mini_batches = 1;  // optimizer steps per epoch over one step's rollouts
  // Rewards (rl/reward.h).
  std::string reward_kind = "exact";  // exact | numeric | regex | program
  std::string reward_marker = {};
  double reward_tolerance = 0;
  bool reward_relative = false;
  std::string reward_pattern = {};
  std::string reward_command = {};
  double reward_timeout_seconds = 30;
  // Held-out greedy accuracy.
  std::string eval_path = {};
  int64_t eval_every = 0;    // steps; 0: never
  int64_t eval_prompts = 0;  // the first this many of eval_path; 0: all
};

void declare_keys(config::Keys<GrpoConfig>& keys);

}  // namespace titan::train
