#include "titan/parallel/tensor_parallel.h"

#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/loss.h"
#include "titan/parallel/comm_ops.h"
#include "titan/parallel/loss_parallel.h"

namespace titan::parallel {

namespace {

// Sequence parallelism splits [batch, seq, dim] activations on the sequence.
constexpr int64_t kSeqDim = 1;

std::string param_name(const nn::Module& m, const std::string& local) {
  return m.path().empty() ? local : m.path() + "." + local;
}

// ids shifted into this rank's rows [lo, lo + n), those outside sent to row 0, and a
// [..., 1] mask of the ids that are this rank's.
std::pair<Tensor, Tensor> local_ids(const Tensor& ids, int64_t lo, int64_t n, DType value_dtype) {
  const Tensor all = ids.to(kI64).contiguous();
  Shape mask_shape = ids.sizes();
  mask_shape.push_back(1);
  Tensor shifted = Tensor::empty(ids.sizes(), {.dtype = kI64});
  Tensor mask = Tensor::empty(mask_shape, {.dtype = value_dtype});
  const int64_t* in = all.data<int64_t>();
  int64_t* out = shifted.data<int64_t>();
  for (int64_t i = 0; i < all.numel(); ++i) {
    const bool mine = in[i] >= lo && in[i] < lo + n;
    out[i] = mine ? in[i] - lo : 0;
    if (value_dtype == kF32)
      mask.data<float>()[i] = mine ? 1.0f : 0.0f;
    else
      mask.data<double>()[i] = mine ? 1.0 : 0.0;
  }
  return {shifted, mask};
}

}  // namespace

TensorParallel::TensorParallel(nn::Module& root, dist::ProcessGroup group, TensorParallelOptions options)
    : root_(root), group_(std::move(group)), options_(options) {}

TensorParallel::~TensorParallel() {
  for (auto& [m, id] : hooks_) m->remove_hook(id);
  for (nn::Module* m : wrapped_) m->set_forward_wrapper({});
}

uint64_t TensorParallel::hook(nn::Module& m, nn::Module::ForwardHook h) {
  const uint64_t id = m.register_forward_hook(std::move(h));
  hooks_.emplace_back(&m, id);
  return id;
}

void TensorParallel::split_parameter(nn::Module& m, const std::string& local, const Tensor& p, int64_t dim) {
  const std::string name = param_name(m, local);
  TITAN_CHECK(!placements_.count(name), "tensor parallelism: parameter ", name, " is given two styles");
  const int n = group_.size(), rank = group_.rank();
  const Shape global_shape = p.sizes();
  narrow_in_place(p, name, dim, rank, n, "parallelism.tensor_parallel_degree");
  placements_[name] = {
      .dim = dim, .offset = rank * p.size(dim), .global_shape = global_shape, .partial_grad = false};
}

void TensorParallel::colwise(nn::Linear& linear) {
  split_parameter(linear, "weight", linear.weight, 0);
  if (linear.bias.defined()) split_parameter(linear, "bias", linear.bias, 0);
}

void TensorParallel::rowwise(nn::Linear& linear) {
  split_parameter(linear, "weight", linear.weight, 1);
  const bool sp = options_.sequence_parallel;
  auto reduce = [g = group_, sp](const Tensor& partial) {
    return sp ? reduce_scatter_along(partial, kSeqDim, g) : reduce_from_group(partial, g);
  };
  if (!linear.bias.defined()) {
    hook(linear, [reduce](nn::Module&, Tensor& out) { out = reduce(out); });
    return;
  }
  // Each rank's product is a partial sum, so the bias joins once, after the reduction; the body
  // would add it on every rank. Every rank then adds it to the whole output, and its gradient is
  // whole; under sequence parallelism each rank adds it to its own tokens, and the gradient is
  // this rank's part of the sum.
  if (sp) mark_partial(linear, "bias", linear.bias);
  linear.set_forward_wrapper([&linear, reduce](const nn::Module::ForwardBody&, const Tensor& x) {
    return ops::add(reduce(ops::linear(x, linear.weight)), linear.bias);
  });
  wrapped_.push_back(&linear);
}

void TensorParallel::vocab_embedding(nn::Embedding& embedding) {
  vocab_size_ = embedding.num_embeddings();
  split_parameter(embedding, "weight", embedding.weight, 0);
  const int64_t rows = embedding.num_embeddings(), lo = group_.rank() * rows;
  vocab_offset_ = lo;
  const bool sp = options_.sequence_parallel;
  const DType dtype = embedding.weight.dtype();
  embedding.set_forward_wrapper([g = group_, sp, lo, rows, dtype](const nn::Module::ForwardBody& body,
                                                                  const Tensor& ids) {
    TITAN_CHECK(!sp || (ids.dim() == 2 && ids.size(kSeqDim) % g.size() == 0), "sequence parallelism: tokens ",
                ids.desc(), " must be [batch, seq] with seq divisible by ", g.size(),
                " (parallelism.tensor_parallel_degree); set training.seq_len to a multiple of it");
    auto [shifted, mask] = local_ids(ids, lo, rows, dtype);
    Tensor partial = body(shifted) * mask;
    return sp ? reduce_scatter_along(partial, kSeqDim, g) : reduce_from_group(partial, g);
  });
  wrapped_.push_back(&embedding);
}

void TensorParallel::vocab_output(nn::Linear& output) {
  const int64_t vocab = output.out_features();
  TITAN_CHECK(vocab_size_ == 0 || vocab_size_ == vocab, "tensor parallelism: output ", output.path(), " has ",
              vocab, " rows, the embedding ", vocab_size_);
  vocab_size_ = vocab;
  colwise(output);
  vocab_offset_ = group_.rank() * output.out_features();
  gather_logits_unless_loss_parallel();
}

void TensorParallel::gather_logits_unless_loss_parallel() {
  gather_logits_ = !options_.loss_parallel;
  if (gather_logits_)
    hook(root_, [g = group_](nn::Module&, Tensor& logits) {
      logits = gather_along_replicated(logits, logits.dim() - 1, g);
    });
}

void TensorParallel::tied_vocab_output(nn::Embedding& embedding) {
  TITAN_CHECK(placements_.count(param_name(embedding, "weight")),
              "tensor parallelism: the tied output reuses ", embedding.path(),
              ".weight, which must be split by vocab_embedding first");
  gather_logits_unless_loss_parallel();
}

void TensorParallel::enter_split_region(nn::Module& m) {
  const bool sp = options_.sequence_parallel;
  hook(m, [g = group_, sp](nn::Module&, Tensor& out) {
    out = sp ? gather_along(out, kSeqDim, g) : copy_to_group(out, g);
  });
}

void TensorParallel::mark_partial(nn::Module& m, const std::string& local, const Tensor& p) {
  const std::string name = param_name(m, local);
  TITAN_CHECK(!placements_.count(name) || placements_[name].dim == -1, "tensor parallelism: parameter ", name,
              " is split and cannot also be a replicated one with partial gradients");
  placements_[name] = {.dim = -1, .offset = 0, .global_shape = p.sizes(), .partial_grad = true};
}

void TensorParallel::mark_partial(nn::Module& m) {
  for (const auto& [local, p] : m.named_parameters()) mark_partial(m, local, p);
}

void TensorParallel::norm(nn::Module& m) {
  if (options_.sequence_parallel) mark_partial(m);
}

void TensorParallel::partial_grads(nn::Module& m) {
  mark_partial(m);
}

void TensorParallel::replicated_region(nn::Module& in, nn::Module& m) {
  if (!options_.sequence_parallel) return;
  hook(in, [g = group_](nn::Module&, Tensor& out) { out = gather_along_replicated(out, kSeqDim, g); });
  hook(m, [g = group_](nn::Module&, Tensor& out) { out = split_along(out, kSeqDim, g); });
}

Tensor TensorParallel::loss(const Tensor& logits, const Tensor& labels) const {
  if (gather_logits_ || vocab_size_ == 0) return ops::cross_entropy(logits, labels);
  return vocab_parallel_cross_entropy(logits, labels, vocab_offset_, vocab_size_, group_);
}

void TensorParallel::reduce_partial_gradients(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> partial;
  for (const auto& [name, t] : named) {
    auto it = placements_.find(name);
    if (it != placements_.end() && it->second.partial_grad) partial.push_back(t);
  }
  all_reduce_gradients(partial, dist::ReduceOp::sum, group_);
}

std::vector<Tensor> TensorParallel::norm_params(
    const std::vector<std::pair<std::string, Tensor>>& named) const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named) {
    auto it = placements_.find(name);
    const bool split = it != placements_.end() && it->second.dim >= 0;
    if (split || group_.rank() == 0) out.push_back(t);
  }
  return out;
}

std::optional<TpPlacement> TensorParallel::placement(const std::string& name) const {
  auto it = placements_.find(name);
  if (it == placements_.end()) return std::nullopt;
  return it->second;
}

std::optional<GlobalSlice> TensorParallel::slice_of(const std::string& name) const {
  auto it = placements_.find(name);
  if (it == placements_.end() || it->second.dim < 0) return std::nullopt;
  GlobalSlice slice{.global_shape = it->second.global_shape,
                    .offsets = Shape(it->second.global_shape.size(), 0)};
  slice.offsets[static_cast<size_t>(it->second.dim)] = it->second.offset;
  return slice;
}

}  // namespace titan::parallel
