#pragma once
// GRPO post-training as the trainer's step engine (training.objective = "grpo", the [grpo] keys).
// One step:
//   1. rollouts: this rank's share of the step's prompts (their order a seeded function of the
//      step, so a resumed run draws what the uninterrupted one drew), group_size completions each,
//      drawn by titan's sampler at the temperature, each token's log-probability recorded;
//   2. rewards of the completions ([grpo] reward), advantages normalised within each prompt's group;
//   3. ppo_epochs passes of mini_batches optimizer steps over the rollouts: the clipped per-token
//      ratio loss of rl/policy_loss.h against the generator's log-probabilities, summed over valid
//      tokens and divided by their count over all ranks, with the data-parallel gradient
//      synchronisation of eager training (DDP, FSDP, HSDP);
//   4. the generator reads the updated weights (every max_staleness + 1 steps).
// The rollouts' generator is the trained model itself where it is whole on this rank and read after
// every step; else a copy (FSDP's gathered weights, or weights allowed to lag). The step's figures
// (rewards, accuracy, clip fraction, KL, entropy, the generator's log-probabilities against the
// trainer's, rollout tokens/s) join the metrics; every grpo.eval_every steps, greedy accuracy on
// grpo.eval_path.
#include <memory>

#include "titan/train/config/job_config.h"
#include "titan/train/step/step_engine.h"

namespace titan::rl {

std::unique_ptr<train::StepEngine> make_grpo_engine(const train::StepParts& parts);

// What train::Trainer takes for cfg's objective: make_grpo_engine under "grpo", else nothing.
train::MakeEngine objective_engine(const train::JobConfig& cfg);

}  // namespace titan::rl
