#include "titan/models/flux/parallelize.h"

#include "titan/parallel/activation_checkpoint.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/parallel/data_parallel_style.h"

namespace titan::models::flux {

std::vector<nn::Module*> blocks(FluxTransformer& model) {
  std::vector<nn::Module*> out;
  for (nn::Module* stack : {static_cast<nn::Module*>(model.double_blocks.get()),
                            static_cast<nn::Module*>(model.single_blocks.get())})
    for (const auto& [name, block] : stack->named_children()) out.push_back(block.get());
  return out;
}

Parallelized parallelize(FluxTransformer& model, const ParallelizeOptions& options) {
  const parallel::ActivationCheckpointMode ac =
      parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode);
  parallel::apply_activation_checkpointing(*model.double_blocks, ac, options.activation_checkpoint_every_k);
  parallel::apply_activation_checkpointing(*model.single_blocks, ac, options.activation_checkpoint_every_k);
  Parallelized out;
  if (dist::DeviceMesh* mesh = options.mesh) {
    if (mesh->degree(dist::MeshAxis::cp) > 1) {
      // The joint [txt; img] sequence split over cp: each rank holds its share of both streams
      // (the trainer shards them), and attention, which sees every pair, runs as a ring.
      out.cp = std::make_unique<parallel::ContextParallel>((*mesh)[dist::MeshAxis::cp], options.seq_len,
                                                           options.block_q, options.block_kv, /*causal=*/false);
      model.set_attend([plan = out.cp.get()](const Tensor& q, const Tensor& k, const Tensor& v) {
        return plan->attend(q, k, v);
      });
    }
    const parallel::DataParallelStyle style = parallel::data_parallel_style(*mesh);
    if (style == parallel::DataParallelStyle::fsdp || style == parallel::DataParallelStyle::hsdp)
      out.fsdp = std::make_unique<parallel::FullyShard>(model, blocks(model), (*mesh)[dist::MeshAxis::dp_shard],
                                                        (*mesh)[dist::MeshAxis::dp_replicate], options.fsdp);
  }
  return out;
}

}  // namespace titan::models::flux
