#include "titan/parallel/tp_layout.h"

#include "titan/core/error.h"
#include "titan/ops/layout.h"

namespace titan::parallel {

TpLayout::TpLayout(int64_t degree, TensorParallelOptions options) : degree_(degree), options_(options) {
  TITAN_CHECK(degree >= 1, "tensor parallelism: the degree must be at least 1, got ", degree);
}

TpLayout::~TpLayout() {
  for (auto& [m, id] : hooks_) m->remove_hook(id);
}

void TpLayout::keep_output(nn::Module& m, Keep keep) {
  hooks_.emplace_back(&m, m.register_forward_hook([keep](nn::Module&, Tensor& out) {
    constexpr int64_t kSeqDim = 1;  // of [batch, seq, ...]
    out = ops::keep_layout(out, keep == Keep::features   ? std::optional<int64_t>(out.dim() - 1)
                                : keep == Keep::sequence ? std::optional<int64_t>(kSeqDim)
                                                         : std::nullopt);
  }));
}

void TpLayout::split(const nn::Module& m, const std::string& local, const Tensor& p, int64_t dim) {
  const std::string name = m.path().empty() ? local : m.path() + "." + local;
  TITAN_CHECK(!splits_.count(name), "tensor parallelism: parameter ", name, " is given two styles");
  TITAN_CHECK(p.size(dim) % degree_ == 0, "tensor parallelism: parameter ", name, " ", p.desc(), ": dim ", dim,
              " of size ", p.size(dim), " does not split into ", degree_,
              " equal parts; parallelism.tensor_parallel_degree must divide it");
  splits_[name] = dim;
}

void TpLayout::colwise(nn::Linear& linear) {
  split(linear, "weight", linear.weight, 0);
  if (linear.bias.defined()) split(linear, "bias", linear.bias, 0);
  keep_output(linear, Keep::features);
}

void TpLayout::rowwise(nn::Linear& linear) {
  split(linear, "weight", linear.weight, 1);
  keep_output(linear, between_blocks());
}

void TpLayout::vocab_embedding(nn::Embedding& embedding) {
  split(embedding, "weight", embedding.weight, 0);
  keep_output(embedding, between_blocks());
}

void TpLayout::enter_split_region(nn::Module& m) { keep_output(m, Keep::whole); }

void TpLayout::replicated_region(nn::Module& in, nn::Module& m) {
  if (!options_.sequence_parallel) return;
  keep_output(in, Keep::whole);
  keep_output(m, Keep::sequence);
}

void TpLayout::vocab_output(nn::Linear& output) {
  colwise(output);
  // Without loss parallelism the split logits are gathered before the loss.
  if (!options_.loss_parallel) keep_output(output, Keep::whole);
}

std::optional<int64_t> TpLayout::split_dim(const std::string& name) const {
  const auto it = splits_.find(name);
  if (it == splits_.end()) return std::nullopt;
  return it->second;
}

}  // namespace titan::parallel
