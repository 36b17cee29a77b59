#pragma once
// Activation checkpointing of a model's blocks ([activation_checkpoint] in the job config), as
// TorchTitan's apply_ac with mode "none" | "full" | "selective" and a layer frequency. Each wrapped
// block keeps only its input through the forward and runs again in backward
// (autograd::checkpoint); the model's code does not change.
#include <cstdint>
#include <string>

#include "titan/nn/module.h"

namespace titan::parallel {

enum class ActivationCheckpointMode { none, full, selective };

// "none" | "full" | "selective"; anything else is an error that lists them.
ActivationCheckpointMode parse_activation_checkpoint_mode(const std::string& mode);

// Wraps the children of `layers` (the model's ModuleList of blocks), in order: none leaves them,
// full wraps every block, selective every `every_k`-th (the k-th, 2k-th, ... counting from one, as
// TorchTitan's selective_ac_option = "k"; k = 1 is full). Returns how many blocks it wrapped. A
// block's call operator must go through Module::run_forward(x, body), or its next call fails.
int64_t apply_activation_checkpointing(nn::Module& layers, ActivationCheckpointMode mode,
                                       int64_t every_k = 1);

}  // namespace titan::parallel
