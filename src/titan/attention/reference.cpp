#include "titan/attention/reference.h"

#include <algorithm>
#include <vector>

#include "titan/attention/qkv_check.h"
#include "titan/attention/scores.h"
#include "titan/attention/splash_lowering.h"
#include "titan/autograd/node.h"
#include "titan/core/parallel.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/checks.h"
#include "titan/ops/reduce.h"

namespace titan::attention {

namespace {

using kernels::cpu::gemm;
using kernels::cpu::SoftmaxKind;

// Query rows per block. A block's probabilities stay in cache between the GEMMs on either side of
// the softmax, and under a causal mask the block reads keys only up to its last row, so all but a
// sliver (one triangle per block) of the masked half of the scores is never computed.
constexpr int64_t kRowBlock = 64;

// Sizes, and where each (batch, head)'s rows live: in a [B, S, H, D] tensor a head is an [S, D]
// matrix with row stride H * D, which BLAS reads in place. Gradients for k and v are first
// accumulated per query head, in tensors laid out like q (see backward_heads).
struct Geometry {
  int64_t B, S, Hq, Hkv, D;
  bool causal;

  int64_t group() const { return Hq / Hkv; }
  // Keys that query `row` sees; keys that any row of a block ending before `end` sees.
  int64_t row_len(int64_t row) const { return causal ? row + 1 : S; }
  int64_t block_cols(int64_t end) const { return causal ? end : S; }
  int64_t q_offset(int64_t b, int64_t h) const { return (b * S * Hq + h) * D; }
  int64_t kv_offset(int64_t b, int64_t h) const { return (b * S * Hkv + h / group()) * D; }
  int64_t q_ld() const { return Hq * D; }
  int64_t kv_ld() const { return Hkv * D; }
};

// out_h = softmax(scores(q_h k_h^T) + mask) v_h for every (b, h), the scores capped where `cap`
// is not 0. `probs`, when given, receives each head's [S, S] probabilities for backward (zero
// where masked within the blocks read, unset beyond them); otherwise one block of scratch per task
// holds them.
template <typename T>
void forward_heads(const Geometry& g, T scale, T cap, const T* q, const T* k, const T* v, T* out, T* probs) {
  // One (b, h) per task unit: BLAS runs single-threaded inside, on matrices that stay in cache.
  parallel_for(0, g.B * g.Hq, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(probs ? 0 : kRowBlock * g.S);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / g.Hq, h = bh % g.Hq;
      const T* qh = q + g.q_offset(b, h);
      const T* kh = k + g.kv_offset(b, h);
      const T* vh = v + g.kv_offset(b, h);
      T* oh = out + g.q_offset(b, h);
      for (int64_t r0 = 0; r0 < g.S; r0 += kRowBlock) {
        const int64_t r1 = std::min(g.S, r0 + kRowBlock), m = r1 - r0, n = g.block_cols(r1);
        T* p = probs ? probs + (bh * g.S + r0) * g.S : scratch.data();
        gemm<T>(false, true, m, n, g.D, scale, qh + r0 * g.q_ld(), g.q_ld(), kh, g.kv_ld(), T(0), p, g.S);
        for (int64_t r = r0; r < r1; ++r) {
          T* row = p + (r - r0) * g.S;
          const int64_t len = g.row_len(r);
          if (cap != T(0)) cap_scores(row, len, cap);
          kernels::cpu::softmax_fwd<T>(SoftmaxKind::softmax, row, row, 1, len);
          std::fill(row + len, row + n, T(0));
        }
        gemm<T>(false, false, m, g.D, n, T(1), p, g.S, vh, g.kv_ld(), T(0), oh + r0 * g.q_ld(), g.q_ld());
      }
    }
  });
}

// The gradients of forward_heads. With a cap, each block's capped scores are computed again for
// the cap's derivative, as the probabilities alone cannot give them where they underflow. dq (if
// wanted) is written in place. dk and dv (if wanted) are
// zero-initialised [B, S, Hq, D] buffers, one slot per query head, that each head's row blocks
// accumulate into; the caller sums each group's slots. Per-query-head slots let every (b, h) run
// in parallel without two tasks adding into one kv head.
template <typename T>
void backward_heads(const Geometry& g, T scale, T cap, const T* q, const T* k, const T* v, const T* probs,
                    const T* dout, T* dq, T* dk, T* dv) {
  parallel_for(0, g.B * g.Hq, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> ds(kRowBlock * g.S), capped(cap != T(0) ? kRowBlock * g.S : 0);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / g.Hq, h = bh % g.Hq, qo = g.q_offset(b, h), ld = g.q_ld();
      const T* kh = k + g.kv_offset(b, h);
      const T* vh = v + g.kv_offset(b, h);
      for (int64_t r0 = 0; r0 < g.S; r0 += kRowBlock) {
        const int64_t r1 = std::min(g.S, r0 + kRowBlock), m = r1 - r0, n = g.block_cols(r1);
        const T* p = probs + (bh * g.S + r0) * g.S;
        const T* dob = dout + qo + r0 * ld;
        // dP = dO v^T, then dS = P * (dP - rowsum(dP * P)) row by row, in place.
        gemm<T>(false, true, m, n, g.D, T(1), dob, ld, vh, g.kv_ld(), T(0), ds.data(), g.S);
        if (cap != T(0))
          gemm<T>(false, true, m, n, g.D, scale, q + qo + r0 * ld, ld, kh, g.kv_ld(), T(0), capped.data(),
                  g.S);
        for (int64_t r = r0; r < r1; ++r) {
          T* row = ds.data() + (r - r0) * g.S;
          const int64_t len = g.row_len(r);
          kernels::cpu::softmax_bwd<T>(SoftmaxKind::softmax, p + (r - r0) * g.S, row, row, 1, len);
          if (cap != T(0)) {
            T* s = capped.data() + (r - r0) * g.S;
            cap_scores(s, len, cap);
            for (int64_t j = 0; j < len; ++j) row[j] *= cap_grad_factor(s[j], T(1) / cap);
          }
          std::fill(row + len, row + n, T(0));
        }
        if (dq)
          gemm<T>(false, false, m, g.D, n, scale, ds.data(), g.S, kh, g.kv_ld(), T(0), dq + qo + r0 * ld, ld);
        if (dk)
          gemm<T>(true, false, n, g.D, m, scale, ds.data(), g.S, q + qo + r0 * ld, ld, T(1), dk + qo, ld);
        if (dv) gemm<T>(true, false, n, g.D, m, T(1), p, g.S, dob, ld, T(1), dv + qo, ld);
      }
    }
  });
}

}  // namespace

Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) {
  constexpr const char* op = "attention_reference";
  check_qkv(op, q, k, v, opts.scale);

  const Geometry g{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), opts.causal};
  const Scores scores = scores_for(op, g.D, opts.scale, opts.softcap);
  const double scale = scores.scale, cap = scores.softcap.value_or(0.0);
  if (graph::any_lazy({&q, &k, &v})) {
    // A window as wide as the sequence shows every key: the unmasked reference. Its products stay
    // in q's dtype, as the reference's GEMMs do whatever autocast says.
    const Mask rule = g.causal ? Mask::causal() : Mask::sliding_window(g.S, g.S);
    return lowered_attention(op, q, k, v, BlockMask::build(rule, 1, g.S), scores, /*bf16_products=*/false);
  }
  Tensor qc = ops::dense(q), kc = ops::dense(k), vc = ops::dense(v);
  Tensor out = Tensor::empty(q.sizes(), q.options());
  const bool train = autograd::needs_grad({&q, &k, &v});
  Tensor probs = train ? Tensor::empty({g.B, g.Hq, g.S, g.S}, q.options()) : Tensor();
  kernels::cpu::dispatch_float(q.dtype(), [&](auto z) {
    using T = decltype(z);
    forward_heads<T>(g, T(scale), T(cap), qc.data<T>(), kc.data<T>(), vc.data<T>(), out.data<T>(),
                     train ? probs.data<T>() : nullptr);
  });
  if (!train) return out;

  autograd::record(
      op, {q, k, v}, {out}, [g, scale, cap, qc, kc, vc, probs](const autograd::GradContext& ctx) {
        Tensor dout = ops::dense(ctx[0]);
        const TensorOptions o = qc.options();
        Tensor dq = ctx.needs(0) ? Tensor::empty(qc.sizes(), o) : Tensor();
        Tensor dk = ctx.needs(1) ? Tensor::zeros(qc.sizes(), o) : Tensor();
        Tensor dv = ctx.needs(2) ? Tensor::zeros(qc.sizes(), o) : Tensor();
        kernels::cpu::dispatch_float(qc.dtype(), [&](auto z) {
          using T = decltype(z);
          auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
          backward_heads<T>(g, T(scale), T(cap), qc.data<T>(), kc.data<T>(), vc.data<T>(), probs.data<T>(),
                            dout.data<T>(), ptr(dq), ptr(dk), ptr(dv));
        });
        // Query head h = kv * group + j sits at [.., kv, j, ..] of the per-query-head slots.
        auto per_kv_head = [&g](const Tensor& t) {
          return !t.defined() || g.group() == 1 ? t : ops::sum(t.view({g.B, g.S, g.Hkv, g.group(), g.D}), 3);
        };
        return std::vector<Tensor>{dq, per_kv_head(dk), per_kv_head(dv)};
      });
  return out;
}

}  // namespace titan::attention
