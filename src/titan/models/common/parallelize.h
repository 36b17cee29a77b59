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
#include "titan/models/common/attention.h"
#include "titan/models/common/feed_forward.h"
#include "titan/nn/norm.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::models::common {

void apply_attention_tp(parallel::TensorParallel& tp, nn::RMSNorm& attention_norm, Attention& attention);
void apply_feed_forward_tp(parallel::TensorParallel& tp, nn::RMSNorm& ffn_norm, FeedForward& feed_forward);
void apply_replicated_feed_forward_tp(parallel::TensorParallel& tp, nn::RMSNorm& ffn_norm, nn::Module& ffn);

}  // namespace titan::models::common
