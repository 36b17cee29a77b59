#include "titan/nn/init.h"

#include "titan/autograd/grad_mode.h"

namespace titan::nn::init {

namespace {
// Runs `fill(dst, seed, first)` on a contiguous f32 or f64 tensor holding t's numel() values:
// t itself when it already is one, else a scratch tensor that is then copied (and cast) into t.
// `has_f64`: whether `fill` can write f64 (otherwise f64 targets get f32-precision values).
template <typename Fill>
void fill_random(const char* op, const Tensor& t, Generator& gen, bool has_f64, const Fill& fill) {
  check_cpu(op, t);
  TITAN_CHECK(is_floating(t.dtype()), "nn::init::", op, ": expected a floating tensor, got ", t.desc());
  DType work = has_f64 && t.dtype() == kF64 ? kF64 : kF32;
  bool direct = t.dtype() == work && t.is_contiguous();
  Tensor dst = direct ? t : Tensor::empty(t.sizes(), {.dtype = work});
  fill(dst, gen.seed(), gen.reserve(static_cast<uint64_t>(t.numel())));
  if (!direct) {
    autograd::NoGradGuard no_grad;
    Tensor(t).copy_(dst);  // a handle copy: the values land in t's storage
  }
}

void check_std(const char* op, double std) {
  TITAN_CHECK(std > 0, "nn::init::", op, ": std must be positive, got ", std);
}
}  // namespace

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  check_std("normal_", std);
  fill_random("normal_", t, gen, true, [&](const Tensor& d, uint64_t seed, uint64_t first) {
    if (d.dtype() == kF64)
      fill_normal(d.data<double>(), d.numel(), seed, first, mean, std);
    else
      fill_normal(d.data<float>(), d.numel(), seed, first, static_cast<float>(mean), static_cast<float>(std));
  });
}

void uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  TITAN_CHECK(lo <= hi, "nn::init::uniform_: expected lo <= hi, got [", lo, ", ", hi, ")");
  fill_random("uniform_", t, gen, true, [&](const Tensor& d, uint64_t seed, uint64_t first) {
    if (d.dtype() == kF64)
      fill_uniform(d.data<double>(), d.numel(), seed, first, lo, hi);
    else
      fill_uniform(d.data<float>(), d.numel(), seed, first, static_cast<float>(lo), static_cast<float>(hi));
  });
}

void trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator& gen) {
  check_std("trunc_normal_", std);
  TITAN_CHECK(a < b, "nn::init::trunc_normal_: expected a < b, got [", a, ", ", b, "]");
  fill_random("trunc_normal_", t, gen, false, [&](const Tensor& d, uint64_t seed, uint64_t first) {
    fill_truncated_normal(d.data<float>(), d.numel(), seed, first, static_cast<float>(mean),
                          static_cast<float>(std), static_cast<float>(a), static_cast<float>(b));
  });
}

void constant_(const Tensor& t, double value) {
  autograd::NoGradGuard no_grad;
  Tensor(t).fill_(value);
}

void zeros_(const Tensor& t) {
  constant_(t, 0.0);
}
void ones_(const Tensor& t) {
  constant_(t, 1.0);
}

}  // namespace titan::nn::init
