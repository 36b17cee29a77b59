#pragma once
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
#include "titan/models/common/feed_forward.h"
#include "titan/nn/norm.h"
#include "titan/models/registry.h"
#include "titan/parallel/context_parallel_plan.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::models::common {

void apply_attention_tp(parallel::TpStyles& tp, nn::RMSNorm& attention_norm, Attention& attention);
void apply_feed_forward_tp(parallel::TpStyles& tp, nn::RMSNorm& ffn_norm, FeedForward& feed_forward);
void apply_replicated_feed_forward_tp(parallel::TpStyles& tp, nn::RMSNorm& ffn_norm, nn::Module& ffn);

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
