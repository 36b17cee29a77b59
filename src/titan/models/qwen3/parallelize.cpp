#include "titan/models/qwen3/parallelize.h"

#include "titan/models/common/parallelize.h"
#include "titan/models/qwen3/model.h"
#include "titan/parallel/activation_checkpoint.h"

namespace titan::models::qwen3 {

void apply_tp(CausalLM& model, parallel::TpStyles& tp) {
  auto* qwen = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(qwen != nullptr, "qwen3::apply_tp: expected a qwen3 Transformer");
  tp.vocab_embedding(*qwen->tok_embeddings);
  for (const auto& block : *qwen->layers) {
    common::apply_attention_tp(tp, *block->attention_norm, *block->attention);
    if (block->moe)
      common::apply_replicated_feed_forward_tp(tp, *block->ffn_norm, *block->moe);
    else
      common::apply_feed_forward_tp(tp, *block->ffn_norm, *block->feed_forward);
  }
  tp.norm(*qwen->norm);
  tp.enter_split_region(*qwen->norm);
  if (qwen->output)
    tp.vocab_output(*qwen->output);
  else
    tp.tied_vocab_output(*qwen->tok_embeddings);
}

Parallelized parallelize(CausalLM& model, const ParallelizeOptions& options) {
  auto* qwen = dynamic_cast<Transformer*>(&model);
  TITAN_CHECK(qwen != nullptr, "qwen3::parallelize: expected a qwen3 Transformer");
  Parallelized out;
  if (options.mesh != nullptr && options.mesh->degree(dist::MeshAxis::tp) > 1) {
    out.tp = std::make_unique<parallel::TensorParallel>(*qwen, (*options.mesh)[dist::MeshAxis::tp], options.tp);
    apply_tp(*qwen, *out.tp);
  }
  if (options.mesh != nullptr && options.mesh->degree(dist::MeshAxis::ep) > 1) {
    out.ep = std::make_unique<parallel::ExpertParallel>((*options.mesh)[dist::MeshAxis::ep]);
    for (const auto& block : *qwen->layers)
      if (block->moe) out.ep->apply(*block->moe);
  }
  if (options.mesh != nullptr) {
    std::vector<common::Attention*> attentions;
    for (const auto& block : *qwen->layers) attentions.push_back(block->attention.get());
    out.cp = common::apply_context_parallel(*qwen, attentions, *options.mesh, options.seq_len,
                                            options.block_q, options.block_kv);
  }
  if (options.mesh != nullptr)
    out.pp = common::apply_pipeline(*qwen, *options.mesh, options.pipeline, {"tok_embeddings"}, {"norm", "output"});
  TITAN_CHECK(!out.pp || qwen->output ||
                  out.pp->schedule().rank_of_stage(0) == out.pp->schedule().rank_of_stage(out.pp->spans().size() - 1),
              "pipeline parallelism: this qwen3 flavor ties its output projection to the token embedding "
              "(tie_embeddings), and its first and last stages run on different ranks; train a flavor without "
              "tied embeddings, or use the ZBVZeroBubble schedule, which puts both stages on rank 0");
  parallel::apply_activation_checkpointing(
      *qwen->layers, parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode),
      options.activation_checkpoint_every_k);
  if (options.mesh != nullptr)
    out.fsdp = parallel::apply_fsdp(*qwen, *qwen->layers, *options.mesh, options.fsdp,
                                    common::blocks_run_here(out.pp.get()));
  return out;
}

}  // namespace titan::models::qwen3
