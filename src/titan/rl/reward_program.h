#pragma once
// A user's reward program: a shell command that reads one JSON object per line on its stdin
// ({"prompt", "completion", "answer"}) and writes one number per line on its stdout, the scores in
// the same order. It runs once per score() call, for the whole batch.
#include <memory>
#include <string>

#include "titan/rl/reward.h"

namespace titan::rl {

// Throws, naming grpo.reward_command or grpo.reward_timeout_seconds, on an empty command or a
// timeout that is not a finite number > 0. Its score() throws when the program misbehaves (exits
// non-zero, is not found, runs past the timeout, writes a line that is not a finite number, or
// more or fewer lines than it was given), saying what was expected and quoting the end of its
// stderr.
std::unique_ptr<Reward> make_program_reward(const std::string& command, double timeout_seconds);

}  // namespace titan::rl
