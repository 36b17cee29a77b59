#include "titan/parallel/activation_checkpoint.h"

#include "titan/autograd/checkpoint.h"

namespace titan::parallel {

ActivationCheckpointMode parse_activation_checkpoint_mode(const std::string& mode) {
  TITAN_CHECK(mode == "none" || mode == "full" || mode == "selective", "activation_checkpoint.mode = '", mode,
              "': must be none, full or selective");
  if (mode == "none") return ActivationCheckpointMode::none;
  return mode == "full" ? ActivationCheckpointMode::full : ActivationCheckpointMode::selective;
}

int64_t apply_activation_checkpointing(nn::Module& layers, ActivationCheckpointMode mode, int64_t every_k) {
  if (mode == ActivationCheckpointMode::none) return 0;
  TITAN_CHECK(mode == ActivationCheckpointMode::full || every_k >= 1,
              "activation_checkpoint: selective checkpointing of every ", every_k,
              "-th layer; the frequency must be at least 1 (1 checkpoints every layer, like full)");
  int64_t period = mode == ActivationCheckpointMode::full ? 1 : every_k;
  int64_t position = 0, wrapped = 0;
  for (const auto& [name, block] : layers.named_children()) {
    if (++position % period != 0) continue;
    block->set_forward_wrapper(
        [](const nn::Module::ForwardBody& body, const Tensor& x) { return autograd::checkpoint(body, x); });
    ++wrapped;
  }
  return wrapped;
}

}  // namespace titan::parallel
