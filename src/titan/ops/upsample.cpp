#include "titan/ops/upsample.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/upsample.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

namespace hlo = graph::hlo;

// x [N, C, H, W] broadcast to [N, C, H, f, W, f] and merged; backward sums dy's blocks.
Tensor upsample_lowered(const Tensor& x, int64_t factor) {
  const Shape& s = x.sizes();
  const Shape blocks{s[0], s[1], s[2], factor, s[3], factor};
  const graph::Value xv = graph::value_of(x, "upsample_nearest");
  Tensor out = graph::tensor_of(hlo::reshape(hlo::broadcast_in_dim(xv, blocks, {0, 1, 2, 4}),
                                             {s[0], s[1], s[2] * factor, s[3] * factor}));
  autograd::record("upsample_nearest", {x}, {out}, [blocks](const autograd::GradContext& g) {
    const graph::Value dy = graph::value_of(g[0], "upsample_nearest backward");
    return std::vector<Tensor>{graph::tensor_of(hlo::reduce_sum(hlo::reshape(dy, blocks), {3, 5}))};
  });
  return out;
}

}  // namespace

Tensor upsample_nearest(const Tensor& x, int64_t factor) {
  const OpSpan span("upsample_nearest", x);
  TITAN_CHECK(x.dim() == 4, "upsample_nearest: x must be [N, C, H, W], got ", x.desc());
  TITAN_CHECK(factor >= 1, "upsample_nearest: the factor must be a positive integer, got ", factor);
  if (x.is_lazy()) {
    TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, "upsample_nearest: x must be f32 or f64, got ",
                x.desc());
    return upsample_lowered(x, factor);
  }
  check_float("upsample_nearest", "x", x);
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty({x.size(0), x.size(1), h * factor, w * factor}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::upsample_nearest_fwd<T>(xc.data<T>(), out.data<T>(), planes, h, w, factor);
  });
  autograd::record(
      "upsample_nearest", {x}, {out},
      [shape = x.sizes(), opts = x.options(), planes, h, w, factor](const autograd::GradContext& g) {
        Tensor gy = g[0].contiguous();
        Tensor dx = Tensor::empty(shape, opts);
        kernels::cpu::dispatch_float(dx.dtype(), [&](auto z) {
          using T = decltype(z);
          kernels::cpu::upsample_nearest_bwd<T>(gy.data<T>(), dx.data<T>(), planes, h, w, factor);
        });
        return std::vector<Tensor>{dx};
      });
  return out;
}

}  // namespace titan::ops
