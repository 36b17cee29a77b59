#pragma once
// The parallel plans of decoders built on common::Decoder: TorchTitan's order in one function, so
// that a family's parallelize states only its own plans.
//
// The tensor-parallel plan of the Llama-family blocks, shared by the families that build from
// common::Attention and common::FeedForward (TorchTitan's plan for Llama 3 and Qwen 3):
//   attention_norm  norm between regions; its output enters the split region
//   wq, wk, wv      column-wise (heads split; GQA keeps its ratio when tp divides both counts)
//   q_norm, k_norm  replicated, partial gradients (each rank normalises its own heads)
//   wo              row-wise
//   ffn_norm        as attention_norm
//   w1, w3 / w2     column-wise / row-wise
// A MoE feed-forward is not split: its experts are replicated on every tp rank and run on the
// whole sequence (parallel::TensorParallel::replicated_region).
#include "titan/dist/device_mesh.h"
#include "titan/models/common/attention.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/registry.h"
#include "titan/nn/norm.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::models::common {

// What a family adds to parallelize_decoder: its tensor-parallel plan (stated to eager's
// TensorParallel here and to graph mode's TpLayout through TrainSpec::plan_tp) and, when its
// blocks can hold experts, how expert parallelism spreads them (null: the mesh's ep is not used).
struct DecoderPlans {
  std::function<void(CausalLM& model, parallel::TpStyles& tp)> apply_tp = nullptr;
  std::function<void(parallel::ExpertParallel& ep)> apply_ep = nullptr;
};

// In TorchTitan's order: tensor parallelism when the mesh has tp ranks, expert parallelism when it
// has ep ranks, context parallelism, pipeline parallelism (the embedding with the first stage, the
// final norm and output with the last), activation checkpointing of the blocks, then FSDP when the
// mesh shards. Without a mesh only activation checkpointing applies.
Parallelized parallelize_decoder(DecoderBase& model, const ParallelizeOptions& options, const DecoderPlans& plans);

// A decoder's tensor-parallel plan around its blocks: the embedding split over the vocabulary,
// then `blocks_plan` (the family's, block by block), then the final norm and the output projection
// over the vocabulary (the embedding's split when tied).
void apply_decoder_tp(DecoderBase& model, parallel::TpStyles& tp, const std::function<void()>& blocks_plan);

// `model` as family `family`'s Transformer `M`; `who` ("llama3::apply_tp") names the caller when
// it is another model.
template <class M>
M& as_family(CausalLM& model, const char* who, const char* family) {
  auto* typed = dynamic_cast<M*>(&model);
  TITAN_CHECK(typed != nullptr, who, ": expected a ", family,
              " Transformer, got another model; apply the plans of the TrainSpec that built it");
  return *typed;
}

void apply_attention_tp(parallel::TpStyles& tp, nn::Module& attention_norm, Attention& attention);
void apply_feed_forward_tp(parallel::TpStyles& tp, nn::Module& ffn_norm, FeedForward& feed_forward);
void apply_replicated_feed_forward_tp(parallel::TpStyles& tp, nn::Module& ffn_norm, nn::Module& ffn);

// Context parallelism over mesh[dist::MeshAxis::cp] (null when its degree is 1): every attention's kernel
// becomes ring attention, and the root's RoPE tables ("rope_cos", "rope_sin") keep the rows of
// this rank's positions.
std::unique_ptr<parallel::ContextParallel> apply_context_parallel(nn::Module& root,
                                                                  const std::vector<Attention*>& attentions,
                                                                  dist::DeviceMesh& mesh, int64_t seq_len,
                                                                  int64_t block_q, int64_t block_kv);

// Pipeline parallelism over mesh[dist::MeshAxis::pp] (null when its degree is 1): the layers of `model` split
// into the stages of options.schedule, the modules named in `first` (the embedding) with the first
// stage and those in `last` (final norm, output) with the last, and every parameter outside this
// rank's stages emptied (parallel/pipeline_parallel.h). Call after tensor parallelism has split
// the parameters and before FSDP shards them.
std::unique_ptr<parallel::PipelineParallel> apply_pipeline(CausalLM& model, dist::DeviceMesh& mesh,
                                                           const PipelineOptions& options,
                                                           const std::vector<std::string>& first,
                                                           const std::vector<std::string>& last);
// For apply_fsdp: the blocks this rank runs (all of them without a pipeline).
std::function<bool(const nn::Module& block)> blocks_run_here(const parallel::PipelineParallel* pp);

}  // namespace titan::models::common
