#include "titan/models/qwen3/parallelize.h"

#include "titan/models/qwen3/model.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan::models::qwen3 {

std::unique_ptr<parallel::FullyShard> parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto* qwen = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(qwen != nullptr, "qwen3::parallelize: expected a qwen3 Transformer");
  parallel::apply_activation_checkpointing(
      *qwen->layers, parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode),
      options.activation_checkpoint_every_k);
  if (options.mesh == nullptr) return nullptr;
  return parallel::apply_fsdp(*qwen, *qwen->layers, *options.mesh, options.fsdp);
}

}  // namespace titan::models::qwen3
