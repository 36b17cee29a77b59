#include "titan/ops/cat.h"

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  TITAN_CHECK(!xs.empty(), "cat: expected at least one tensor, got none");
  const OpSpan span("cat", xs.front());
  const Tensor& first = xs.front();
  const int64_t d = dim < 0 ? dim + first.dim() : dim;
  TITAN_CHECK(d >= 0 && d < first.dim(), "cat: dim ", dim, " is out of range for ", first.desc());
  Shape out_sizes = first.sizes();
  out_sizes[d] = 0;
  bool lazy = false;
  for (const Tensor& x : xs) {
    TITAN_CHECK(x.dim() == first.dim() && x.dtype() == first.dtype(), "cat: every tensor must have ",
                first.dim(), " dims and dtype ", first.desc(), "'s; got ", x.desc());
    for (int64_t i = 0; i < x.dim(); ++i)
      TITAN_CHECK(i == d || x.size(i) == first.size(i), "cat: ", x.desc(), " and ", first.desc(),
                  " differ in dim ", i, ", which is not the joined dim ", d);
    out_sizes[d] += x.size(d);
    lazy = lazy || x.is_lazy();
  }
  Tensor out;
  if (lazy) {
    std::vector<graph::Value> values;
    values.reserve(xs.size());
    for (const Tensor& x : xs) values.push_back(graph::value_of(x, "cat"));
    out = graph::tensor_of(graph::hlo::concatenate(values, d));
  } else {
    out = Tensor::empty(out_sizes, first.options());
    int64_t at = 0;
    for (const Tensor& x : xs) {
      check_cpu("cat", x);
      out.narrow(d, at, x.size(d)).copy_(x);
      at += x.size(d);
    }
  }
  std::vector<int64_t> lengths;
  lengths.reserve(xs.size());
  for (const Tensor& x : xs) lengths.push_back(x.size(d));
  autograd::record("cat", xs, {out}, [d, lengths](const autograd::GradContext& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t n : lengths) {
      grads.push_back(g[0].narrow(d, at, n).contiguous());
      at += n;
    }
    return grads;
  });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TITAN_CHECK(d >= 0 && d < x.dim(), "split: dim ", dim, " is out of range for ", x.desc());
  int64_t total = 0;
  for (const int64_t n : sizes) {
    TITAN_CHECK(n >= 0, "split: sizes ", shape_str(sizes), " has a negative size");
    total += n;
  }
  TITAN_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " add up to ", total, ", not to dim ", d,
              " of ", x.desc());
  std::vector<Tensor> pieces;
  {
    // The views record nothing themselves: the node below stands for all of them.
    const autograd::NoGradGuard views;
    int64_t at = 0;
    for (const int64_t n : sizes) {
      pieces.push_back(x.narrow(d, at, n));
      at += n;
    }
  }
  autograd::record("split", {x}, pieces,
                   [d](const autograd::GradContext& g) { return std::vector<Tensor>{cat(g.grads, d)}; });
  return pieces;
}

}  // namespace titan::ops
