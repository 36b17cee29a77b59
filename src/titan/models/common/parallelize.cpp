#include "titan/models/common/parallelize.h"

#include "titan/parallel/activation_checkpoint.h"

namespace titan::models::common {

Parallelized parallelize_decoder(DecoderBase& model, const ParallelizeOptions& options, const DecoderPlans& plans) {
  Parallelized out;
  dist::DeviceMesh* mesh = options.mesh;
  if (mesh != nullptr && mesh->degree(dist::MeshAxis::tp) > 1) {
    out.tp = std::make_unique<parallel::TensorParallel>(model, (*mesh)[dist::MeshAxis::tp], options.tp);
    plans.apply_tp(model, *out.tp);
  }
  if (mesh != nullptr && plans.apply_ep && mesh->degree(dist::MeshAxis::ep) > 1) {
    out.ep = std::make_unique<parallel::ExpertParallel>((*mesh)[dist::MeshAxis::ep]);
    plans.apply_ep(*out.ep);
  }
  if (mesh != nullptr) {
    out.cp = apply_context_parallel(model, model.attentions(), *mesh, options.seq_len, options.block_q,
                                    options.block_kv);
    out.pp = apply_pipeline(model, *mesh, options.pipeline, {"tok_embeddings"}, {"norm", "output"});
  }
  // A tied output reads the embedding's weight, which only the first stage's rank holds.
  TITAN_CHECK(!out.pp || model.output ||
                  out.pp->schedule().rank_of_stage(0) == out.pp->schedule().rank_of_stage(out.pp->spans().size() - 1),
              "pipeline parallelism: this ", model.family(), " flavor ties its output projection to the token "
              "embedding (tie_embeddings), and its first and last stages run on different ranks; train a flavor "
              "without tied embeddings, or use the ZBVZeroBubble schedule, which puts both stages on rank 0");
  parallel::apply_activation_checkpointing(
      model.blocks(), parallel::parse_activation_checkpoint_mode(options.activation_checkpoint_mode),
      options.activation_checkpoint_every_k);
  if (mesh != nullptr)
    out.fsdp = parallel::apply_fsdp(model, model.blocks(), *mesh, options.fsdp, blocks_run_here(out.pp.get()),
                                    out.ep ? std::function<bool(const std::string&)>(
                                                 [ep = out.ep.get()](const std::string& name) { return ep->is_expert(name); })
                                           : nullptr);
  return out;
}

void apply_decoder_tp(DecoderBase& model, parallel::TpStyles& tp, const std::function<void()>& blocks_plan) {
  tp.vocab_embedding(*model.tok_embeddings);
  blocks_plan();
  tp.norm(*model.norm);
  tp.enter_split_region(*model.norm);
  if (model.output)
    tp.vocab_output(*model.output);
  else
    tp.tied_vocab_output(*model.tok_embeddings);
}

void apply_attention_tp(parallel::TpStyles& tp, nn::Module& attention_norm, Attention& attention) {
  const int64_t n = tp.degree();
  const int64_t heads = attention.wq->out_features() / attention.head_dim(),
                kv_heads = attention.wk->out_features() / attention.head_dim();
  TITAN_CHECK(heads % n == 0 && kv_heads % n == 0, "tensor parallelism: ", attention.path(), " has ", heads,
              " query and ", kv_heads, " key/value heads, which do not split into ", n,
              " equal parts; parallelism.tensor_parallel_degree must divide both");
  TITAN_CHECK(!attention.qk_norm_full_width(), "tensor parallelism: ", attention.path(),
              " normalises q and k over all heads together (OLMo 2's QK-norm), which a split by heads "
              "cannot compute on one rank; train it with parallelism.tensor_parallel_degree = 1");
  tp.norm(attention_norm);
  tp.enter_split_region(attention_norm);
  for (const auto& w : {attention.wq, attention.wk, attention.wv}) tp.colwise(*w);
  if (attention.q_norm) {
    tp.partial_grads(*attention.q_norm);
    tp.partial_grads(*attention.k_norm);
  }
  tp.rowwise(*attention.wo);
}

void apply_feed_forward_tp(parallel::TpStyles& tp, nn::Module& ffn_norm, FeedForward& feed_forward) {
  tp.norm(ffn_norm);
  tp.enter_split_region(ffn_norm);
  tp.colwise(*feed_forward.w1);
  if (feed_forward.w3) tp.colwise(*feed_forward.w3);
  tp.rowwise(*feed_forward.w2);
}

void apply_replicated_feed_forward_tp(parallel::TpStyles& tp, nn::Module& ffn_norm, nn::Module& ffn) {
  tp.norm(ffn_norm);
  tp.replicated_region(ffn_norm, ffn);
}

std::unique_ptr<parallel::ContextParallel> apply_context_parallel(nn::Module& root,
                                                                  const std::vector<Attention*>& attentions,
                                                                  dist::DeviceMesh& mesh, int64_t seq_len,
                                                                  int64_t block_q, int64_t block_kv) {
  if (mesh.degree(dist::MeshAxis::cp) == 1) return nullptr;
  auto cp = std::make_unique<parallel::ContextParallel>(mesh[dist::MeshAxis::cp], seq_len, block_q, block_kv);
  parallel::ContextParallel* plan = cp.get();
  for (Attention* a : attentions)
    a->set_attend([plan, a](const Tensor& q, const Tensor& k, const Tensor& v) {
      return plan->attend(q, k, v, a->scale(), a->softcap(),
                          a->sliding_window() > 0 ? std::optional<int64_t>(a->sliding_window() - 1) : std::nullopt);
    });
  // Every RoPE table at the root: rope_cos and rope_sin, and a model's others (one per layer type)
  // named rope_<i>_cos and rope_<i>_sin.
  int tables = 0;
  for (const auto& [name, buffer] : root.named_buffers())
    if (name.starts_with("rope_") && (name.ends_with("_cos") || name.ends_with("_sin"))) {
      cp->shard_position_table(buffer);
      ++tables;
    }
  TITAN_CHECK(tables >= 2 && tables % 2 == 0,
              "context parallelism: the model has no RoPE tables named rope_cos and rope_sin at its "
              "root to map to this rank's positions");
  return cp;
}

std::unique_ptr<parallel::PipelineParallel> apply_pipeline(CausalLM& model, dist::DeviceMesh& mesh,
                                                           const PipelineOptions& options,
                                                           const std::vector<std::string>& first,
                                                           const std::vector<std::string>& last) {
  const int64_t pp = mesh.degree(dist::MeshAxis::pp);
  if (pp == 1) return nullptr;
  parallel::PipelineLayout layout = parallel::pipeline_layout(options.schedule, pp, options.micro_batches,
                                                              model.num_layers(), options.split_points);
  const auto last_stage = static_cast<int64_t>(layout.spans.size()) - 1;
  auto plan = std::make_unique<parallel::PipelineParallel>(model, std::move(layout.schedule),
                                                           std::move(layout.spans), mesh[dist::MeshAxis::pp]);
  for (const std::string& name : first) plan->place(name, 0);
  for (const std::string& name : last) plan->place(name, last_stage);
  plan->apply();
  return plan;
}

std::function<bool(const nn::Module& block)> blocks_run_here(const parallel::PipelineParallel* pp) {
  if (pp == nullptr) return nullptr;
  return [pp](const nn::Module& block) {
    for (const auto& [name, p] : block.named_parameters()) return pp->holds(block.path() + "." + name);
    return true;
  };
}

}  // namespace titan::models::common
