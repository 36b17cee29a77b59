#include "titan/nn/init.h"

#include <algorithm>

#include "titan/autograd/grad_mode.h"
#include "titan/core/parallel.h"
#include "titan/nn/sharded_init.h"

namespace titan::nn::init {

namespace {
// fill(out, work, n, seed, first) writes elements [first, first + n) of stream `seed` to out, an
// array of n values of dtype `work` (f32, or f64 when the fill has one).

void refuse_meta(const char* op, const Tensor& t) {
  TITAN_CHECK(!t.is_meta(), "nn::init::", op, ": ", t.desc(),
              " is a meta tensor with no shard target, so there is nowhere to write its values; "
              "initialise a model built under a MetaScope through parallel::deferred_init, which "
              "tells init where each parameter's values live");
}

// The part of the target's dest that holds the box (its leading corner), as a view to write
// through rather than one to differentiate.
Tensor box_of(const ShardTarget& target) {
  Tensor box = target.dest.detach();
  for (size_t d = 0; d < target.sizes.size(); ++d)
    box = box.narrow(static_cast<int64_t>(d), 0, target.sizes[d]);
  return box;
}

// The whole tensor, as on one rank: t itself when it is a contiguous tensor of the working dtype,
// else a scratch tensor then copied (and cast) into t.
template <typename Fill>
void fill_whole(const char* op, const Tensor& t, DType work, Generator& gen, const Fill& fill) {
  const bool direct = t.dtype() == work && t.is_contiguous();
  Tensor dst = direct ? t : Tensor::empty(t.sizes(), {.dtype = work});
  fill(dst.data_ptr(), work, t.numel(), gen.seed(), gen.reserve(static_cast<uint64_t>(t.numel())));
  if (!direct) {
    autograd::NoGradGuard no_grad;
    Tensor(t).copy_(dst);  // a handle copy: the values land in t's storage
  }
}

// This rank's box of the logical tensor: the generator moves past all of it, the box's values go
// to the target's dest.
template <typename Fill>
void fill_box(const ShardTarget& target, DType work, Generator& gen, const Fill& fill) {
  const uint64_t first = gen.reserve(static_cast<uint64_t>(numel_of(target.global_shape)));
  Tensor box = box_of(target);
  const bool direct = box.dtype() == work && box.is_contiguous();
  Tensor dst = direct ? box : Tensor::empty(target.sizes, {.dtype = work});
  const BoxRuns runs(target);
  if (runs.count() > 0) {
    char* base = static_cast<char*>(dst.data_ptr());
    const int64_t element = static_cast<int64_t>(dtype_size(work));
    // Short runs (a box cut on a late dim) are spread over threads by run, long ones by element.
    parallel_for(0, runs.count(), std::max<int64_t>(1, 4096 / runs.length()), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        fill(base + r * runs.length() * element, work, runs.length(), gen.seed(), first + runs.start(r));
    });
  }
  if (!direct) {
    autograd::NoGradGuard no_grad;
    box.copy_(dst);
  }
}

// `has_f64`: whether `fill` can write f64 (otherwise f64 targets get f32-precision values).
template <typename Fill>
void fill_random(const char* op, const Tensor& t, Generator& gen, bool has_f64, const Fill& fill) {
  const MetaScope real(false);  // scratch tensors hold values
  const ShardTarget* target = ShardedInitScope::find(t);
  if (!target) refuse_meta(op, t);
  const Tensor& where = target ? target->dest : t;
  check_cpu(op, where);
  TITAN_CHECK(is_floating(t.dtype()), "nn::init::", op, ": expected a floating tensor, got ", t.desc());
  const DType work = has_f64 && t.dtype() == kF64 ? kF64 : kF32;
  if (target)
    fill_box(*target, work, gen, fill);
  else
    fill_whole(op, t, work, gen, fill);
}

void check_std(const char* op, double std) {
  TITAN_CHECK(std > 0, "nn::init::", op, ": std must be positive, got ", std);
}
}  // namespace

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  check_std("normal_", std);
  fill_random("normal_", t, gen, true, [&](void* out, DType work, int64_t n, uint64_t seed, uint64_t first) {
    if (work == kF64)
      fill_normal(static_cast<double*>(out), n, seed, first, mean, std);
    else
      fill_normal(static_cast<float*>(out), n, seed, first, static_cast<float>(mean),
                  static_cast<float>(std));
  });
}

void uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  TITAN_CHECK(lo <= hi, "nn::init::uniform_: expected lo <= hi, got [", lo, ", ", hi, ")");
  fill_random("uniform_", t, gen, true, [&](void* out, DType work, int64_t n, uint64_t seed, uint64_t first) {
    if (work == kF64)
      fill_uniform(static_cast<double*>(out), n, seed, first, lo, hi);
    else
      fill_uniform(static_cast<float*>(out), n, seed, first, static_cast<float>(lo), static_cast<float>(hi));
  });
}

void trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator& gen) {
  check_std("trunc_normal_", std);
  TITAN_CHECK(a < b, "nn::init::trunc_normal_: expected a < b, got [", a, ", ", b, "]");
  fill_random("trunc_normal_", t, gen, false,
              [&](void* out, DType, int64_t n, uint64_t seed, uint64_t first) {
                fill_truncated_normal(static_cast<float*>(out), n, seed, first, static_cast<float>(mean),
                                      static_cast<float>(std), static_cast<float>(a), static_cast<float>(b));
              });
}

void constant_(const Tensor& t, double value) {
  autograd::NoGradGuard no_grad;
  const ShardTarget* target = ShardedInitScope::find(t);
  if (!target) {
    refuse_meta("constant_", t);
    Tensor(t).fill_(value);
    return;
  }
  box_of(*target).fill_(value);
}

void zeros_(const Tensor& t) {
  constant_(t, 0.0);
}
void ones_(const Tensor& t) {
  constant_(t, 1.0);
}

}  // namespace titan::nn::init
