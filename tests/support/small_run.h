#pragma once
// A small debug-model run on a small text, fast enough for a unit test: the trainer tests of eager
// and graph mode share it.
#include <string>
#include <vector>

#include "titan/train/trainer.h"

namespace titan::train {

// `base` is a shipped config (under configs/); checkpoints are off unless an override turns them on.
JobConfig small_config(const std::vector<std::string>& overrides = {}, const std::string& base = "llama3/debug.toml");
// Trains it, the log kept from the console.
TrainResult run(const JobConfig& cfg);

}  // namespace titan::train
