#include "titan/models/llama3/parallelize.h"

#include "titan/models/llama3/model.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan::models::llama3 {

std::unique_ptr<parallel::FullyShard> parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto* llama = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(llama != nullptr, "llama3::parallelize: expected a llama3 Transformer");
  parallel::apply_activation_checkpointing(
      *llama->layers, parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode),
      options.activation_checkpoint_every_k);
  if (options.mesh == nullptr) return nullptr;
  return parallel::apply_fsdp(*llama, *llama->layers, *options.mesh, options.fsdp);
}

}  // namespace titan::models::llama3
