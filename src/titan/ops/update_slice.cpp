#include "titan/ops/update_slice.h"

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

Tensor update_slice(const Tensor& dst, const Tensor& src, int64_t dim, const Tensor& start) {
  const OpSpan span("update_slice", dst, src);
  TITAN_CHECK(dst.defined() && src.defined() && dst.dim() == src.dim() && dim >= 0 && dim < dst.dim() &&
                  dst.dtype() == src.dtype(),
              "update_slice: expected dst and src of one dtype and rank and 0 <= dim < rank, got dst ",
              dst.defined() ? dst.desc() : std::string("none"), ", src ", src.defined() ? src.desc() : std::string("none"),
              ", dim ", dim);
  for (int64_t d = 0; d < dst.dim(); ++d)
    TITAN_CHECK(d == dim ? src.size(d) <= dst.size(d) : src.size(d) == dst.size(d), "update_slice: src ", src.desc(),
                " does not fit dst ", dst.desc(), " along dim ", d, " (src may be shorter along dim ", dim, " only)");
  TITAN_CHECK(start.defined() && start.dim() == 0 && start.dtype() == kI64,
              "update_slice: the start must be a 0-d i64 tensor, got ", start.defined() ? start.desc() : std::string("none"));
  TITAN_CHECK(!autograd::needs_grad({&dst, &src}), "update_slice: an input requires grad, but there is no backward; "
              "run it under autograd::NoGradGuard");
  if (graph::any_lazy({&dst, &src, &start})) {
    namespace hlo = graph::hlo;
    const graph::Value at = start.is_lazy() ? graph::value_of(start, "update_slice's start")
                                            : hlo::scalar(start.item(), kI64);
    std::vector<graph::Value> starts(static_cast<size_t>(dst.dim()), hlo::scalar(0, kI64));
    starts[static_cast<size_t>(dim)] = at;
    return graph::tensor_of(hlo::dynamic_update_slice(graph::value_of(dst, "update_slice"),
                                                      graph::value_of(src, "update_slice"), starts));
  }
  const auto s = static_cast<int64_t>(start.item());
  TITAN_CHECK(s >= 0 && s + src.size(dim) <= dst.size(dim), "update_slice: src ", src.desc(), " at ", s,
              " along dim ", dim, " runs outside dst ", dst.desc());
  Tensor out = dst.clone();
  out.narrow(dim, s, src.size(dim)).copy_(src);
  return out;
}

}  // namespace titan::ops
