#include "titan/models/common/parallelize.h"

namespace titan::models::common {

void apply_attention_tp(parallel::TensorParallel& tp, nn::RMSNorm& attention_norm, Attention& attention) {
  const int64_t n = tp.group().size();
  const int64_t heads = attention.wq->out_features() / attention.head_dim(),
                kv_heads = attention.wk->out_features() / attention.head_dim();
  TITAN_CHECK(heads % n == 0 && kv_heads % n == 0, "tensor parallelism: ", attention.path(), " has ", heads,
              " query and ", kv_heads, " key/value heads, which do not split into ", n,
              " equal parts; parallelism.tensor_parallel_degree must divide both");
  tp.norm(attention_norm);
  tp.enter_split_region(attention_norm);
  for (const auto& w : {attention.wq, attention.wk, attention.wv}) tp.colwise(*w);
  if (attention.q_norm) {
    tp.partial_grads(*attention.q_norm);
    tp.partial_grads(*attention.k_norm);
  }
  tp.rowwise(*attention.wo);
}

void apply_feed_forward_tp(parallel::TensorParallel& tp, nn::RMSNorm& ffn_norm, FeedForward& feed_forward) {
  tp.norm(ffn_norm);
  tp.enter_split_region(ffn_norm);
  tp.colwise(*feed_forward.w1);
  tp.colwise(*feed_forward.w3);
  tp.rowwise(*feed_forward.w2);
}

void apply_replicated_feed_forward_tp(parallel::TensorParallel& tp, nn::RMSNorm& ffn_norm, nn::Module& ffn) {
  tp.norm(ffn_norm);
  tp.replicated_region(ffn_norm, ffn);
}

}  // namespace titan::models::common
