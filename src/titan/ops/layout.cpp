#include "titan/ops/layout.h"

#include "titan/autograd/node.h"
#include "titan/graph/ir/hlo.h"
#include "titan/graph/lazy.h"

namespace titan::ops {

Tensor keep_layout(const Tensor& x, std::optional<int64_t> split_dim) {
  if (!x.is_lazy()) return x;
  const graph::Program::ActivationLayout& layout = graph::current_program().activation_layout();
  if (!layout) return x;
  const graph::Value v = graph::value_of(x, "keep_layout");
  Tensor out = graph::tensor_of(graph::hlo::constrain(v, layout(v.shape, split_dim)));
  autograd::record("keep_layout", {x}, {out}, [split_dim](const autograd::GradContext& g) {
    return std::vector<Tensor>{keep_layout(g[0], split_dim)};
  });
  return out;
}

}  // namespace titan::ops
