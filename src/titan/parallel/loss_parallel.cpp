#include "titan/parallel/loss_parallel.h"

#include <cmath>
#include <limits>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/parallel/comm_ops.h"

namespace titan::parallel {

namespace {

// Marks a row with no target on any rank; no shifted id can take this value.
constexpr int64_t kNoTarget = std::numeric_limits<int64_t>::min();

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_offset,
                                    int64_t vocab_size, dist::ProcessGroup group, int64_t ignore_index) {
  check_cpu("vocab_parallel_cross_entropy", logits);
  check_cpu("vocab_parallel_cross_entropy", targets);
  TITAN_CHECK(logits.dtype() == kF32 || logits.dtype() == kF64,
              "vocab_parallel_cross_entropy: logits must be f32 or f64, got ", logits.desc());
  TITAN_CHECK(targets.dtype() == kI32 || targets.dtype() == kI64,
              "vocab_parallel_cross_entropy: targets must be class indices (i32 or i64), got ",
              targets.desc());
  TITAN_CHECK(logits.dim() >= 1, "vocab_parallel_cross_entropy: logits need a class dim, got ",
              logits.desc());
  const Shape row_shape(logits.sizes().begin(), logits.sizes().end() - 1);
  TITAN_CHECK(targets.sizes() == row_shape, "vocab_parallel_cross_entropy: logits ", logits.desc(),
              " need targets of shape ", shape_str(row_shape), ", got ", targets.desc());
  const int64_t local = logits.size(-1), rows = targets.numel();
  TITAN_CHECK(local > 0 && vocab_offset >= 0 && vocab_offset + local <= vocab_size,
              "vocab_parallel_cross_entropy: this rank's ids [", vocab_offset, ", ", vocab_offset + local,
              ") do not lie inside the vocabulary of ", vocab_size);
  Tensor tc = targets.contiguous();
  kernels::cpu::check_index_range("cross_entropy", "target", tc, vocab_size, ignore_index);
  Tensor lc = logits.detach().contiguous();

  // Shifted ids: the rank holding a target sees it in [0, local); the others out of range, where
  // the kernels write no one-hot term.
  Tensor shifted = Tensor::empty({rows}, {.dtype = kI64});
  int64_t count = 0;
  {
    const Tensor t64 = tc.to(kI64).contiguous();
    const int64_t* t = t64.data<int64_t>();
    int64_t* s = shifted.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const bool skip = t[r] == ignore_index;
      s[r] = skip ? kNoTarget : t[r] - vocab_offset;
      count += skip ? 0 : 1;
    }
  }

  Tensor lse = Tensor::empty({rows}, lc.options());
  Tensor sums = Tensor::empty({2 * rows}, lc.options());
  double loss = 0;
  kernels::cpu::dispatch_float(lc.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor none = Tensor::full({rows}, static_cast<double>(kNoTarget), {.dtype = kI64});
    kernels::cpu::cross_entropy_forward<T, int64_t>(lc.data<T>(), none.data<int64_t>(), rows, local,
                                                    kNoTarget, lse.data<T>());
    Tensor top = lse.clone();
    group.all_reduce(top, dist::ReduceOp::max).wait();
    count_collective(group, static_cast<double>(top.nbytes()), true, 0);
    T* l = lse.data<T>();
    const T* m = top.data<T>();
    T* s = sums.data<T>();
    const int64_t* sh = shifted.data<int64_t>();
    const T* x = lc.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      // A rank whose logits are all -inf has lse -inf and adds nothing.
      s[r] = std::isinf(m[r]) && m[r] < 0 ? T(0) : std::exp(l[r] - m[r]);
      s[rows + r] = sh[r] >= 0 && sh[r] < local ? x[r * local + sh[r]] : T(0);
    }
    group.all_reduce(sums, dist::ReduceOp::sum).wait();
    count_collective(group, static_cast<double>(sums.nbytes()), true, 0);
    for (int64_t r = 0; r < rows; ++r) {
      l[r] = m[r] + std::log(s[r]);
      if (sh[r] != kNoTarget) loss += static_cast<double>(l[r]) - static_cast<double>(s[rows + r]);
    }
  });
  // As ops::cross_entropy: a mean over no counted rows is NaN, with zero gradients.
  const double scale =
      count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  Tensor out = Tensor::full({}, loss * scale, logits.options());
  autograd::record("vocab_parallel_cross_entropy", {logits}, {out},
                   [lc, shifted, lse, scale](const autograd::GradContext& g) {
                     Tensor dl = Tensor::empty(lc.sizes(), lc.options());
                     const double s = g[0].item() * scale;
                     kernels::cpu::dispatch_float(lc.dtype(), [&](auto tag) {
                       using T = decltype(tag);
                       kernels::cpu::cross_entropy_backward<T, int64_t>(
                           lc.data<T>(), shifted.data<int64_t>(), lse.data<T>(), shifted.numel(), lc.size(-1),
                           kNoTarget, static_cast<T>(s), dl.data<T>());
                     });
                     return std::vector<Tensor>{dl};
                   });
  return out;
}

}  // namespace titan::parallel
