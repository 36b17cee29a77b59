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

// Over `base` with these overrides, a float32 run and a training.mixed_precision_param = "bfloat16"
// one of 100 steps on the bundled Bible: their loss curves, as means over 10 steps, within 2% of
// each other, not equal (the products did run in bf16), and falling (so that they mean something).
void expect_bf16_curve_near_float32(const std::string& base, const std::vector<std::string>& overrides);

}  // namespace titan::train
