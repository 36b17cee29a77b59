#include "titan/parallel/data_parallel.h"

namespace titan::parallel {

namespace {

// Parameter `p`'s place in a bucket's flat buffer.
Tensor slot(const Tensor& flat, const Tensor& p, int64_t offset) {
  return flat.as_strided(p.sizes(), contiguous_strides(p.sizes()), offset);
}

}  // namespace

DataParallel::DataParallel(std::vector<Tensor> params, dist::ProcessGroup group, DataParallelOptions options)
    : params_(std::move(params)), group_(std::move(group)) {
  TITAN_CHECK(options.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive, got ", options.bucket_bytes);
  for (const Tensor& p : params_) {
    check_cpu("DataParallel", p);
    TITAN_CHECK(p.is_contiguous() && (p.dtype() == kF32 || p.dtype() == kF64), "DataParallel: parameter ",
                p.desc(), " must be a contiguous f32 or f64 tensor");
  }
  if (group_.size() == 1) return;  // nothing to average
  // Reverse order: the last layers' gradients are complete first. A bucket holds one dtype.
  std::vector<std::vector<size_t>> groups;
  std::vector<DType> dtypes;
  std::vector<int64_t> bytes;
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& p = params_[i];
    auto n = static_cast<int64_t>(p.nbytes());
    if (groups.empty() || dtypes.back() != p.dtype() || (bytes.back() > 0 && bytes.back() + n > options.bucket_bytes)) {
      groups.emplace_back();
      dtypes.push_back(p.dtype());
      bytes.push_back(0);
    }
    groups.back().push_back(i);
    bytes.back() += n;
  }
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    int64_t numel = 0;
    for (size_t i : groups[b]) {
      bucket.params.push_back(i);
      bucket.offsets.push_back(numel);
      numel += params_[i].numel();
    }
    bucket.flat = Tensor::empty({numel}, {.dtype = dtypes[b]});
    buckets_.push_back(std::move(bucket));
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b].params)
      params_[i].register_post_accumulate_grad_hook([this, alive = alive_, b](Tensor&) {
        if (!*alive) return;
        Bucket& bucket = buckets_[b];
        if (sync_ && ++bucket.accumulated == bucket.params.size()) start_reduce(bucket);
      });
}

void DataParallel::broadcast_parameters() {
  std::vector<dist::Work> works;
  for (const Tensor& p : params_) works.push_back(group_.broadcast(p, 0));
  for (dist::Work& w : works) w.wait();
}

void DataParallel::start_reduce(Bucket& b) {
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    Tensor s = slot(b.flat, p, b.offsets[k]);
    Tensor g = p.grad();
    if (g.defined())
      s.copy_(g);
    else
      s.zero_();
  }
  b.reducing = group_.all_reduce(b.flat, dist::ReduceOp::avg);
}

void DataParallel::average_gradients() {
  for (Bucket& b : buckets_)
    if (!b.reducing) start_reduce(b);
  for (Bucket& b : buckets_) {
    b.reducing->wait();
    b.reducing.reset();
    b.accumulated = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      Tensor s = slot(b.flat, p, b.offsets[k]);
      Tensor g = p.grad();
      if (g.defined()) {
        g.copy_(s);
      } else {
        Tensor fresh = Tensor::empty(p.sizes(), p.options());
        fresh.copy_(s);
        p.set_grad(fresh);
      }
    }
  }
}

}  // namespace titan::parallel
