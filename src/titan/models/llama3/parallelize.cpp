#include "titan/models/llama3/parallelize.h"

#include "titan/models/common/parallelize.h"
#include "titan/models/llama3/model.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan::models::llama3 {

void apply_tp(CausalLM& model, parallel::TpStyles& tp) {
  auto* llama = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(llama != nullptr, "llama3::apply_tp: expected a llama3 Transformer");
  tp.vocab_embedding(*llama->tok_embeddings);
  for (const auto& block : *llama->layers) {
    common::apply_attention_tp(tp, *block->attention_norm, *block->attention);
    common::apply_feed_forward_tp(tp, *block->ffn_norm, *block->feed_forward);
  }
  tp.norm(*llama->norm);
  tp.enter_split_region(*llama->norm);
  tp.vocab_output(*llama->output);
}

Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto* llama = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(llama != nullptr, "llama3::parallelize: expected a llama3 Transformer");
  Parallelized out;
  if (options.mesh != nullptr && options.mesh->degree(dist::MeshAxis::tp) > 1) {
    out.tp = std::make_unique<parallel::TensorParallel>(*llama, (*options.mesh)[dist::MeshAxis::tp], options.tp);
    apply_tp(*llama, *out.tp);
  }
  if (options.mesh != nullptr) {
    std::vector<common::Attention*> attentions;
    for (const auto& block : *llama->layers) attentions.push_back(block->attention.get());
    out.cp = common::apply_context_parallel(*llama, attentions, *options.mesh, options.seq_len,
                                            options.block_q, options.block_kv);
  }
  if (options.mesh != nullptr)
    out.pp = common::apply_pipeline(*llama, *options.mesh, options.pipeline, {"tok_embeddings"}, {"norm", "output"});
  parallel::apply_activation_checkpointing(
      *llama->layers, parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode),
      options.activation_checkpoint_every_k);
  if (options.mesh != nullptr)
    out.fsdp = parallel::apply_fsdp(*llama, *llama->layers, *options.mesh, options.fsdp,
                                    common::blocks_run_here(out.pp.get()));
  return out;
}

}  // namespace titan::models::llama3
