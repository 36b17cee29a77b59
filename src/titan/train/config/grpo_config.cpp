#include "titan/train/config/grpo_config.h"

namespace titan::train {

void declare_keys(config::Keys<GrpoConfig>& keys) {
  using C = GrpoConfig;
  keys.add("prompts_path", &C::prompts_path, {},
           "JSONL of prompts, one object per line with prompt_field and answer_field (required)")
      .add("prompt_field", &C::prompt_field, config::non_empty(), "the prompts' text field")
      .add("answer_field", &C::answer_field, config::non_empty(),
           "the field holding each prompt's reference answer, handed to the reward")
      .add("prompts_per_step", &C::prompts_per_step, config::positive(),
           "prompts per step over all data-parallel ranks, which split them evenly")
      .add("group_size", &C::group_size, config::positive(), "completions drawn per prompt (GRPO's G)")
      .add("max_new_tokens", &C::max_new_tokens, config::positive(), "tokens per completion at most")
      .add("temperature", &C::temperature, {.min = 0, .min_open = true},
           "the rollouts' sampling temperature; log-probabilities are taken under it")
      .add("generator", &C::generator, config::one_of({"eager", "graph"}),
           "what draws the rollouts: the eager model, or graph mode's decoder through [compile]'s plugin")
      .add("max_staleness", &C::max_staleness, config::non_negative(),
           "steps the generator's weights may lag the trainer's; 0: they are read after every step")
      .add("advantage_norm", &C::advantage_norm, config::one_of({"none", "std", "unbiased_std"}),
           "a group's rewards minus their mean, divided by: nothing (Dr. GRPO), the population std "
           "(TorchTitan) or the unbiased std (VeRL), plus 1e-6")
      .add("clip_low", &C::clip_low, {.min = 0, .max = 1, .max_open = true},
           "the ratio's clip below 1 (1 - clip_low)")
      .add("clip_high", &C::clip_high, config::non_negative(),
           "the ratio's clip above 1 (1 + clip_high); DAPO raises it, e.g. 0.28")
      .add("dual_clip", &C::dual_clip, {.min = 1, .min_open = true, .sentinel = 0},
           "VeRL's dual clip c > 1 bounding the loss of negative advantages at c * |A|; 0: off")
      .add("kl_coef", &C::kl_coef, config::non_negative(),
           "weight of the k3 KL to a frozen copy of the starting model; 0: none, and no copy is kept")
      .add("log_ratio_clamp", &C::log_ratio_clamp, config::positive(),
           "the log-ratio of trainer to generator is clamped to +-this before exp")
      .add("ppo_epochs", &C::ppo_epochs, config::positive(), "passes over each step's rollouts")
      .add("mini_batches", &C::mini_batches, config::positive(),
           "optimizer steps per pass; each takes an equal share of every rank's rollouts")
      .add("reward_kind", &C::reward_kind, config::one_of({"exact", "numeric", "regex", "program"}),
           "exact: the answer after the last reward_marker equals answer_field's; numeric: the same as "
           "numbers within reward_tolerance; regex: reward_pattern matches (its group 1 equals the "
           "answer); program: reward_command scores JSON lines")
      .add("reward_marker", &C::reward_marker, {},
           "the final answer is the completion's text after the last marker, to the end of that line; "
           "empty: the completion's first line")
      .add("reward_tolerance", &C::reward_tolerance, config::non_negative(),
           "numeric: the largest error scored 1")
      .add("reward_relative", &C::reward_relative, {}, "numeric: the tolerance is relative to the answer")
      .add("reward_pattern", &C::reward_pattern, {}, "regex: an ECMAScript regular expression")
      .add("reward_command", &C::reward_command, {},
           "program: a shell command reading {\"prompt\",\"completion\",\"answer\"} JSON lines on stdin and "
           "writing one score per line")
      .add("reward_timeout_seconds", &C::reward_timeout_seconds, config::positive(),
           "program: how long one scoring may run")
      .add("eval_path", &C::eval_path, {}, "JSONL of held-out prompts for greedy accuracy; empty: none")
      .add("eval_every", &C::eval_every, config::non_negative(),
           "evaluate before the first step and after every this many; 0: never")
      .add("eval_prompts", &C::eval_prompts, config::non_negative(),
           "the first this many of eval_path; 0: all");
}

}  // namespace titan::train
