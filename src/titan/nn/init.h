#pragma once
// In-place parameter initialisation, as torch.nn.init (same names and argument order, with the
// generator last). A random fill takes numel() consecutive indices of `gen`'s Philox stream in
// row-major order and advances the generator past them: a seed gives the same values whatever
// the thread count, and successive calls draw fresh numbers. f32, f64 and bf16 tensors, any
// strides; values are written without recording autograd history.
//
// Inside an nn::init::ShardedInitScope (sharded_init.h), a call on a handle registered there
// fills only the box of the logical tensor this rank owns, into the target's dest, with the
// values a one-rank call puts there, and moves the generator past the whole logical tensor. A meta
// handle (core/meta.h) with no target is refused.
#include "titan/core/tensor.h"

namespace titan::nn::init {

void normal_(const Tensor& t, double mean, double std, Generator& gen);
void uniform_(const Tensor& t, double lo, double hi, Generator& gen);
// Normal(mean, std) truncated to [a, b]. As in PyTorch, a and b are absolute values, not
// multiples of std (TorchTitan's trunc_normal_(std=0.02) keeps the default [-2, 2], which then
// truncates nothing). f64 tensors get f32-precision values: core/rng has only an f32 fill.
void trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator& gen);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);

}  // namespace titan::nn::init
