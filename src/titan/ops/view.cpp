// Differentiable views (Tensor methods declared in core/tensor.h). A view shares storage; its
// backward maps the gradient back to the base's geometry.
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"
#include "titan/ops/reduce.h"

namespace titan {

namespace {
// Strides for viewing `t` as `sizes` without copying, or empty when impossible (PyTorch's rule:
// each run of input dims that is contiguous in memory can be split or merged freely).
std::optional<Shape> view_strides(const Tensor& t, const Shape& sizes) {
  if (t.numel() == 0) return contiguous_strides(sizes);
  const Shape& os = t.sizes();
  const Shape& ost = t.strides();
  Shape st(sizes.size());
  int64_t view_d = static_cast<int64_t>(sizes.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= sizes[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

Shape infer_sizes(const Shape& sizes, int64_t numel, const char* op, const Tensor& t) {
  Shape out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TITAN_CHECK(infer < 0, op, ": more than one -1 in ", shape_str(sizes));
      infer = static_cast<int64_t>(i);
    } else {
      TITAN_CHECK(out[i] >= 0, op, ": invalid size in ", shape_str(sizes));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TITAN_CHECK(known != 0 && numel % known == 0, op, ": cannot view ", t.desc(), " as ",
                shape_str(sizes));
    out[infer] = numel / known;
  }
  TITAN_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(sizes), " has ", numel_of(out),
              " elements but tensor ", t.desc(), " has ", numel);
  return out;
}

// The view of `self` with this geometry; for a value of a captured step (which has no strides),
// `lowered` of its value instead.
Tensor viewed(const Tensor& self, const Shape& sizes, const Shape& strides, int64_t offset,
              const std::function<graph::Value(const graph::Value&)>& lowered) {
  if (!self.is_lazy()) return self.as_strided(sizes, strides, offset);
  return graph::tensor_of(lowered(graph::value_of(self, "view")));
}

Tensor record_reshape_like(const char* name, const Tensor& self, Tensor out) {
  Shape in_sizes = self.sizes();
  autograd::record(name, {self}, {out}, [in_sizes](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0].reshape(in_sizes)};
  });
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& sizes) const {
  Shape s = infer_sizes(sizes, numel(), "view", *this);
  auto st = view_strides(*this, s);
  TITAN_CHECK(st.has_value(), "view: cannot view ", desc(), " with strides ", shape_str(strides()),
              " as ", shape_str(s), " without a copy; call reshape() or contiguous() first");
  return record_reshape_like("view", *this, viewed(*this, s, *st, storage_offset(), [&](const graph::Value& v) {
                               return graph::hlo::reshape(v, s);
                             }));
}

Tensor Tensor::reshape(const Shape& sizes) const {
  Shape s = infer_sizes(sizes, numel(), "reshape", *this);
  if (auto st = view_strides(*this, s))
    return record_reshape_like("reshape", *this,
                               viewed(*this, s, *st, storage_offset(),
                                      [&](const graph::Value& v) { return graph::hlo::reshape(v, s); }));
  return contiguous().view(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  TITAN_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(),
              " dims given for tensor ", desc());
  Shape sz(dims.size()), st(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    TITAN_CHECK(!used[d], "permute: dim ", d, " repeated in ", shape_str(dims));
    used[d] = true;
    sz[i] = sizes()[d];
    st[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Shape wrapped(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) wrapped[i] = wrap_dim(dims[i], dim(), "permute");
  Tensor out = viewed(*this, sz, st, storage_offset(),
                      [&](const graph::Value& v) { return graph::hlo::transpose(v, wrapped); });
  autograd::record("permute", {*this}, {out}, [inverse](const autograd::GradContext& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a], perm[b]);
  return permute(perm);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t dd = wrap_dim(d, dim(), "narrow");
  int64_t n = sizes()[dd];
  TITAN_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ",
              start + length, ") is outside dim ", dd, " of size ", n, " of ", desc());
  Shape sz = sizes();
  sz[dd] = length;
  Tensor out = viewed(*this, sz, strides(), storage_offset() + start * strides()[dd],
                      [&](const graph::Value& v) { return graph::hlo::narrow(v, dd, start, length); });
  Shape in_sizes = sizes();
  autograd::record("narrow", {*this}, {out}, [in_sizes, dd, start, length](const autograd::GradContext& g) {
    if (g[0].is_lazy()) {
      // Zeros around the gradient, as one value.
      const graph::Value gv = graph::value_of(g[0], "narrow backward");
      Shape before = in_sizes, after = in_sizes;
      before[dd] = start;
      after[dd] = in_sizes[dd] - start - length;
      std::vector<graph::Value> parts;
      if (start > 0) parts.push_back(graph::hlo::constant(0.0, before, gv.dtype));
      parts.push_back(gv);
      if (after[dd] > 0) parts.push_back(graph::hlo::constant(0.0, after, gv.dtype));
      return std::vector<Tensor>{graph::tensor_of(graph::hlo::concatenate(parts, dd))};
    }
    Tensor full = Tensor::zeros(in_sizes, g[0].options());
    full.narrow(dd, start, length).copy_(g[0]);
    return std::vector<Tensor>{full};
  });
  return out;
}

Tensor Tensor::expand(const Shape& sizes) const {
  TITAN_CHECK(sizes.size() >= static_cast<size_t>(dim()), "expand: cannot expand ", desc(), " to ",
              shape_str(sizes), " (fewer dims)");
  size_t lead = sizes.size() - static_cast<size_t>(dim());
  Shape sz(sizes.size()), st(sizes.size(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t want = sizes[i];
    if (i < lead) {
      TITAN_CHECK(want >= 0, "expand: new leading dim must be explicit in ", shape_str(sizes));
      sz[i] = want;
      continue;
    }
    int64_t have = this->sizes()[i - lead];
    if (want == -1) want = have;
    TITAN_CHECK(have == want || have == 1, "expand: cannot expand ", desc(), " to ", shape_str(sizes),
                " (dim ", i, ": ", have, " -> ", want, ")");
    sz[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  Tensor out = viewed(*this, sz, st, storage_offset(),
                      [&](const graph::Value& v) { return graph::hlo::broadcast_to(v, sz); });
  Shape in_sizes = this->sizes();
  autograd::record("expand", {*this}, {out}, [in_sizes](const autograd::GradContext& g) {
    return std::vector<Tensor>{ops::sum_to(g[0], in_sizes)};
  });
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t dd = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(s.begin() + dd, 1);
  return view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  int64_t dd = wrap_dim(d, dim(), "squeeze");
  TITAN_CHECK(sizes()[dd] == 1, "squeeze: dim ", dd, " of ", desc(), " has size ", sizes()[dd],
              ", not 1");
  Shape s = sizes();
  s.erase(s.begin() + dd);
  return view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  TITAN_CHECK(a <= b, "flatten: start_dim ", a, " is after end_dim ", b);
  Shape s(sizes().begin(), sizes().begin() + a);
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= sizes()[i];
  s.push_back(m);
  s.insert(s.end(), sizes().begin() + b + 1, sizes().end());
  return reshape(s);
}

}  // namespace titan
