#include "titan/attention/splash.h"

#include <vector>

#include "titan/attention/qkv_check.h"
#include "titan/attention/splash_kernel.h"
#include "titan/attention/splash_lowering.h"
#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::attention {

Tensor splash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                        const SplashOptions& opts) {
  constexpr const char* op = "splash_attention";
  const ops::OpSpan span(op, q, k, v);
  check_qkv(op, q, k, v, opts.scale);
  const int64_t B = q.size(0), S = q.size(1), Hq = q.size(2), D = q.size(3);
  TITAN_CHECK(mask.seq() == S, op, ": the BlockMask was built for seq ", mask.seq(), " but q has ", S,
              " tokens (q ", q.desc(), "); build it with BlockMask::build(mask, batch, ", S, ")");
  TITAN_CHECK(mask.batch() == 1 || mask.batch() == B, op, ": the BlockMask (", mask.mask().describe(),
              ") holds ", mask.batch(), " batch rows but q has ", B, "; build it for this batch");

  const Scores scores = scores_for(op, D, opts.scale, opts.softcap);
  // Decided here, once: backward multiplies as forward did, whatever autocast says when it runs.
  const bool bf16_products = matmul_operand_dtype(q.dtype()) == kBF16;
  if (graph::any_lazy({&q, &k, &v})) return lowered_attention(op, q, k, v, mask, scores, bf16_products);
  Tensor qc = ops::dense(q), kc = ops::dense(k), vc = ops::dense(v);
  Tensor out = Tensor::empty(q.sizes(), q.options());
  Tensor lse = Tensor::empty({B, Hq, S}, q.options());
  splash_forward(qc, kc, vc, mask, scores, bf16_products, out, lse);
  if (!autograd::needs_grad({&q, &k, &v})) return out;

  autograd::record(
      op, {q, k, v}, {out},
      [mask, scores, bf16_products, qc, kc, vc, o = out.detach(), lse](const autograd::GradContext& ctx) {
        Tensor dout = ops::dense(ctx[0]);
        auto grad_if = [&](size_t i, const Tensor& like) {
          return ctx.needs(i) ? Tensor::empty(like.sizes(), like.options()) : Tensor();
        };
        Tensor dq = grad_if(0, qc), dk = grad_if(1, kc), dv = grad_if(2, vc);
        Tensor delta = Tensor::empty(lse.sizes(), lse.options());
        splash_backward(qc, kc, vc, mask, scores, bf16_products, o, lse, delta, dout, dq, dk, dv,
                        /*accumulate=*/false);
        return std::vector<Tensor>{dq, dk, dv};
      });
  return out;
}

}  // namespace titan::attention
