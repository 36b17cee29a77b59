#include "titan/parallel/context_parallel_plan.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/in_place.h"
#include "titan/parallel/comm_ops.h"

namespace titan::parallel {

ContextParallel::ContextParallel(dist::ProcessGroup group, int64_t seq_len, int64_t block_q, int64_t block_kv,
                                 bool causal)
    : group_(std::move(group)), seq_len_(seq_len) {
  TITAN_CHECK(seq_len % (2 * group_.size()) == 0, "context parallelism: training.seq_len = ", seq_len,
              " must be a multiple of 2 x parallelism.context_parallel_degree = ", 2 * group_.size(),
              " (each rank holds two equal chunks of every sequence)");
  options_.causal = causal;
  options_.block_q = block_q;
  options_.block_kv = block_kv;
}

void ContextParallel::shard_position_table(const Tensor& table) const {
  TITAN_CHECK(table.dim() >= 1 && table.size(0) >= seq_len_, "context parallelism: a position table of ",
              table.desc(), " does not cover training.seq_len = ", seq_len_);
  const std::vector<int64_t> positions = cp_positions(seq_len_, group_.rank(), group_.size());
  Shape shape = table.sizes();
  shape[0] = static_cast<int64_t>(positions.size());
  Tensor rows = Tensor::empty(shape, table.options());
  {
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < positions.size(); ++i)
      rows.narrow(0, static_cast<int64_t>(i), 1).copy_(table.detach().narrow(0, positions[i], 1));
  }
  rebind_in_place(table, rows);
}

Tensor ContextParallel::shard(const Tensor& t) const {
  TITAN_CHECK(t.dim() == 2 && t.size(1) == seq_len_, "context parallelism: expected a [batch, ", seq_len_,
              "] tensor of the batch, got ", t.desc(), "; every sequence must be training.seq_len long");
  return cp_shard(t, 1, group_.rank(), group_.size());
}

Tensor ContextParallel::shard(const Tensor& t, int64_t dim) const {
  return cp_shard(t, dim, group_.rank(), group_.size());
}

void ContextParallel::begin_batch(int64_t batch, const Tensor& document_ids) {
  options_.document_ids = document_ids;
  batch_ = batch;
  masks_.clear();
}

Tensor ContextParallel::attend(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                               std::optional<double> softcap, std::optional<int64_t> window_left) {
  TITAN_CHECK(batch_ == q.size(0),
              "context parallelism: attention ran before its batch's "
              "begin_batch (or with another batch size); the trainer calls begin_batch before each forward");
  auto it = masks_.find(window_left);
  if (it == masks_.end()) {
    RingAttentionOptions opts = options_;
    opts.window_left = window_left;
    it = masks_.emplace(window_left, RingMasks::build(batch_, seq_len_ / group_.size(), opts, group_.rank(),
                                                      group_.size()))
             .first;
  }
  return ring_attention(q, k, v, it->second, group_, scale, softcap);
}

void ContextParallel::average_gradients(const std::vector<Tensor>& params) {
  all_reduce_gradients(params, dist::ReduceOp::avg, group_);
}

}  // namespace titan::parallel
