#include "titan/ops/token_log_probs.h"

#include <cmath>
#include <vector>

#include "titan/autograd/node.h"
#include "titan/kernels/cpu/cross_entropy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

double inverse_temperature(const char* op, double temperature) {
  TITAN_CHECK(std::isfinite(temperature) && temperature > 0, op,
              ": temperature must be positive and finite (the logits are divided by it), got ", temperature);
  return 1.0 / temperature;
}

Shape row_shape(const Tensor& logits) {
  return Shape(logits.sizes().begin(), logits.sizes().end() - 1);
}

}  // namespace

Tensor token_log_probs(const Tensor& logits, const Tensor& targets, double temperature,
                       int64_t ignore_index) {
  const OpSpan span("token_log_probs", logits, targets);
  check_cpu("token_log_probs", logits);
  check_cpu("token_log_probs", targets);
  const int64_t vocab = check_class_logits("token_log_probs", logits, targets), rows = targets.numel();
  const double inv_t = inverse_temperature("token_log_probs", temperature);
  Tensor ld = dense(logits), td = dense(targets);
  kernels::cpu::check_index_range("token_log_probs", "target", td, vocab, ignore_index);

  Tensor lse = Tensor::empty({rows}, logits.options());
  Tensor out = Tensor::empty(row_shape(logits), logits.options());
  kernels::cpu::dispatch_float_index(logits.dtype(), targets.dtype(), [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    kernels::cpu::token_log_probs_forward<T, I>(ld.data<T>(), td.data<I>(), rows, vocab, ignore_index,
                                                static_cast<T>(inv_t), lse.data<T>(), out.data<T>());
  });

  auto backward = [ld, td, lse, ignore_index, inv_t](const autograd::GradContext& g) {
    const int64_t rows = td.numel(), vocab = ld.size(-1);
    Tensor dl = Tensor::empty(ld.sizes(), ld.options());
    Tensor go = g[0].to(ld.dtype()).contiguous();
    kernels::cpu::dispatch_float_index(ld.dtype(), td.dtype(), [&](auto t, auto i) {
      using T = decltype(t);
      using I = decltype(i);
      // d log p_target / d logit_j = (onehot_j - p_j) / T: the kernel's (p - onehot) * scale.
      std::vector<T> scale(static_cast<size_t>(rows));
      const T* gp = go.data<T>();
      for (int64_t r = 0; r < rows; ++r) scale[r] = -gp[r] * static_cast<T>(inv_t);
      kernels::cpu::softmax_onehot_backward<T, I>(ld.data<T>(), td.data<I>(), lse.data<T>(), rows, vocab,
                                                  ignore_index, static_cast<T>(inv_t), scale.data(),
                                                  dl.data<T>());
    });
    return std::vector<Tensor>{dl};
  };
  autograd::record("token_log_probs", {logits}, {out}, backward);
  return out;
}

Tensor token_entropy(const Tensor& logits, double temperature) {
  const OpSpan span("token_entropy", logits);
  check_float("token_entropy", "logits", logits);
  TITAN_CHECK(logits.dim() >= 1 && logits.size(-1) > 0,
              "token_entropy: logits must have a non-empty class dim (the last), got ", logits.desc());
  const double inv_t = inverse_temperature("token_entropy", temperature);
  const int64_t vocab = logits.size(-1), rows = logits.numel() / vocab;
  const Tensor ld = dense(logits);
  Tensor lse = Tensor::empty({rows}, logits.options());
  Tensor out = Tensor::empty(row_shape(logits), logits.options());
  kernels::cpu::dispatch_float(logits.dtype(), [&](auto t) {
    using T = decltype(t);
    kernels::cpu::row_logsumexp<T>(ld.data<T>(), rows, vocab, static_cast<T>(inv_t), lse.data<T>());
    kernels::cpu::row_entropy<T>(ld.data<T>(), lse.data<T>(), rows, vocab, static_cast<T>(inv_t),
                                 out.data<T>());
  });
  return out;
}

}  // namespace titan::ops
