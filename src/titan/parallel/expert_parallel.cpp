#include "titan/parallel/expert_parallel.h"

#include "titan/autograd/grad_mode.h"
#include "titan/ops/arith.h"
#include "titan/ops/moe.h"
#include "titan/parallel/comm_ops.h"

namespace titan::parallel {

namespace {

const char* const kDegreeKey = "parallelism.expert_parallel_degree";

}  // namespace

AllToAllTokenDispatcher::AllToAllTokenDispatcher(dist::ProcessGroup group, int64_t local_experts)
    : group_(std::move(group)), local_experts_(local_experts) {
  TITAN_CHECK(local_experts_ >= 1, "expert parallelism: ", local_experts_, " experts per rank");
}

nn::moe::TokenDispatcher::Dispatched AllToAllTokenDispatcher::dispatch(const Tensor& x, const Tensor& ids,
                                                                       int64_t num_experts) {
  const int64_t n = group_.size(), local = local_experts_;
  TITAN_CHECK(num_experts == n * local, "expert parallelism: a layer of ", num_experts, " experts over ", n,
              " ranks holding ", local, " each");
  Dispatched d;
  d.permutation = ops::sort_by_expert(ids, num_experts);
  // The experts of a rank are contiguous, so rows sorted by expert are grouped by destination.
  const std::vector<int64_t>& counts = d.permutation.tokens_per_expert.host;
  d.send_rows.assign(static_cast<size_t>(n), 0);
  for (int64_t e = 0; e < num_experts; ++e) d.send_rows[static_cast<size_t>(e / local)] += counts[e];
  // recv[s * local + e]: the rows source rank s sends for this rank's expert e.
  const std::vector<int64_t> blocks(static_cast<size_t>(n), local);
  const std::vector<int64_t> recv =
      exchange_rows(Tensor::from_vector(counts, {num_experts}), blocks, blocks, group_).to_vector<int64_t>();
  d.recv_rows.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> rows_per_expert(static_cast<size_t>(local), 0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t e = 0; e < local; ++e) {
      d.recv_rows[static_cast<size_t>(s)] += recv[s * local + e];
      rows_per_expert[static_cast<size_t>(e)] += recv[s * local + e];
    }
  d.rows_per_expert = std::move(rows_per_expert);
  const Tensor received =
      all_to_all_rows(ops::permute_tokens(x, d.permutation), d.send_rows, d.recv_rows, group_);
  // (source, expert) blocks -> (expert, source) order.
  std::vector<int64_t> start(recv.size());
  int64_t at = 0;
  for (size_t b = 0; b < recv.size(); ++b) {
    start[b] = at;
    at += recv[b];
  }
  d.regroup = Tensor::empty({at}, {.dtype = kI64});
  int64_t* order = d.regroup.data<int64_t>();
  for (int64_t e = 0; e < local; ++e)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t r = 0; r < recv[s * local + e]; ++r) *order++ = start[s * local + e] + r;
  d.rows = ops::permute_rows(received, d.regroup);
  return d;
}

Tensor AllToAllTokenDispatcher::combine(const Tensor& expert_out, const Tensor& weights,
                                        const Dispatched& dispatched) {
  const Tensor by_source = ops::permute_rows(expert_out, ops::inverse_permutation(dispatched.regroup));
  const Tensor rows = all_to_all_rows(by_source, dispatched.recv_rows, dispatched.send_rows, group_);
  return ops::unpermute_tokens(rows, weights, dispatched.permutation);
}

ExpertParallel::ExpertParallel(dist::ProcessGroup group) : group_(std::move(group)) {}

void ExpertParallel::apply(nn::moe::MoE& moe) {
  nn::moe::GroupedExperts& experts = *moe.experts;
  const int64_t n = group_.size(), rank = group_.rank(), total = experts.num_experts();
  TITAN_CHECK(total % n == 0, kDegreeKey, " = ", n, ": ", moe.path(), " has ", total,
              " experts (moe.num_experts), which do not split into ", n,
              " equal parts; choose a degree that divides the number of experts");
  for (const auto& [local, p] : experts.named_parameters()) {
    const std::string name = experts.path().empty() ? local : experts.path() + "." + local;
    GlobalSlice slice{.global_shape = p.sizes(), .offsets = Shape(p.sizes().size(), 0)};
    slice.offsets[0] = rank * (total / n);
    narrow_in_place(p, name, 0, rank, n, kDegreeKey);
    slices_[name] = std::move(slice);
  }
  moe.dispatcher = std::make_shared<AllToAllTokenDispatcher>(group_, total / n);
}

std::optional<GlobalSlice> ExpertParallel::slice_of(const std::string& name) const {
  auto it = slices_.find(name);
  if (it == slices_.end()) return std::nullopt;
  return it->second;
}

void ExpertParallel::scale_expert_gradients(const std::vector<std::pair<std::string, Tensor>>& named) {
  const double scale = 1.0 / static_cast<double>(group_.size());
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : named) {
    Tensor grad = t.grad();
    if (is_expert(name) && grad.defined()) grad.copy_(ops::scale(grad, scale));
  }
}

}  // namespace titan::parallel
