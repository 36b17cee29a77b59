#include "titan/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/autograd/node.h"
#include "titan/core/meta.h"
#include "titan/core/parallel.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/rope.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

namespace {

void rotate(const Tensor& x, const Tensor& out, const RopeTable& table, RopeLayout layout, int64_t start_pos,
            bool transpose) {
  kernels::cpu::RopeGeometry geo{x.size(0), x.size(1), x.size(2), x.size(3), table.rotary_dim, start_pos};
  const bool interleaved = layout == RopeLayout::interleaved;
  const float* c = table.cos.data<float>();
  const float* s = table.sin.data<float>();
  if (x.dtype() == kF32)
    kernels::cpu::rope<float>(x.data<float>(), out.data<float>(), c, s, geo, interleaved, transpose);
  else
    kernels::cpu::rope<double>(x.data<double>(), out.data<double>(), c, s, geo, interleaved, transpose);
}

namespace hlo = graph::hlo;
using graph::Value;

// The kernel's rotation of x [batch, seq, heads, rotary_dim] by cos/sin [seq, rotary_dim / 2] (sin
// negated for the transpose): pair (a, b) -> (a c - b s, b c + a s).
Value rotated(const Value& x, const Value& cos, const Value& sin, RopeLayout layout) {
  const int64_t b = x.shape[0], seq = x.shape[1], heads = x.shape[2], half = x.shape[3] / 2;
  const Shape halves{b, seq, heads, half};
  const Value c = hlo::broadcast_in_dim(cos, halves, {1, 3}), s = hlo::broadcast_in_dim(sin, halves, {1, 3});
  // The pairs' members as two [b, seq, heads, half] values: the halves, or the even and odd dims.
  Value first, second;
  if (layout == RopeLayout::rotate_half) {
    first = hlo::narrow(x, 3, 0, half);
    second = hlo::narrow(x, 3, half, half);
  } else {
    const Value pairs = hlo::reshape(x, {b, seq, heads, half, 2});
    first = hlo::reshape(hlo::narrow(pairs, 4, 0, 1), halves);
    second = hlo::reshape(hlo::narrow(pairs, 4, 1, 1), halves);
  }
  const Value y0 = hlo::sub(hlo::mul(first, c), hlo::mul(second, s));
  const Value y1 = hlo::add(hlo::mul(second, c), hlo::mul(first, s));
  if (layout == RopeLayout::rotate_half) return hlo::concatenate({y0, y1}, 3);
  const Shape one{b, seq, heads, half, 1};
  return hlo::reshape(hlo::concatenate({hlo::reshape(y0, one), hlo::reshape(y1, one)}, 4), x.shape);
}

// x [batch, seq, heads, head_dim] with its first rotary_dim dims rotated and the rest as they are.
Value partly_rotated(const Value& x, const Value& cos, const Value& sin, RopeLayout layout,
                     int64_t rotary_dim) {
  const int64_t head_dim = x.shape[3];
  if (rotary_dim == head_dim) return rotated(x, cos, sin, layout);
  return hlo::concatenate({rotated(hlo::narrow(x, 3, 0, rotary_dim), cos, sin, layout),
                           hlo::narrow(x, 3, rotary_dim, head_dim - rotary_dim)},
                          3);
}

// The table enters the program once, whole (one input however many layers use it); the rows of
// this call's positions are sliced in the program, at a fixed start or at `start`'s value (a
// scalar i64 of the program: decoding's position). f64 inputs widen the f32 table, as the kernel.
Value table_rows(const Tensor& t, const char* name, int64_t start_pos, const Tensor& start, int64_t seq,
                 DType dtype) {
  const Value whole = graph::host_input(t, name);
  const Value rows = start.defined() ? hlo::dynamic_slice(whole, {graph::value_of(start, "rope's start"),
                                                                  hlo::scalar(0, kI64)},
                                                          {seq, whole.shape[1]})
                                     : hlo::narrow(whole, 0, start_pos, seq);
  return hlo::convert(rows, dtype);
}

Tensor rope_lowered(const Tensor& x, const RopeTable& table, RopeLayout layout, int64_t start_pos,
                    const Tensor& start) {
  const int64_t seq = x.size(1);
  const Value xv = graph::value_of(x, "rope");
  const Value c = table_rows(table.cos, "rope_cos", start_pos, start, seq, xv.dtype);
  const Value s = table_rows(table.sin, "rope_sin", start_pos, start, seq, xv.dtype);
  const int64_t rotary_dim = table.rotary_dim;
  Tensor out = graph::tensor_of(partly_rotated(xv, c, s, layout, rotary_dim));
  Tensor cd = graph::tensor_of(c), sd = graph::tensor_of(s);
  autograd::record("rope", {x}, {out}, [cd, sd, layout, rotary_dim](const autograd::GradContext& g) {
    const Value minus_sin = hlo::neg(graph::value_of(sd, "rope"));
    return std::vector<Tensor>{graph::tensor_of(partly_rotated(
        graph::value_of(g[0], "rope backward"), graph::value_of(cd, "rope"), minus_sin, layout, rotary_dim))};
  });
  return out;
}

}  // namespace

RopeTable RopeTable::build(const RopeSpec& spec, int64_t max_seq) {
  const RopeFrequencies f = rope_frequencies(spec, max_seq);
  // Computed here, whole on every rank, from nothing a rank's shard decides: real even while a
  // model is built under a MetaScope.
  const MetaScope real(false);
  const int64_t half = spec.rotated() / 2;
  RopeTable t{Tensor::empty({max_seq, half}), Tensor::empty({max_seq, half}), spec.head_dim, spec.rotated()};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  parallel_for(0, max_seq, std::max<int64_t>(1, 4096 / half), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        // The angle in f64: in f32 it would be off by ~pos * 6e-8 radians at long positions.
        const double angle = static_cast<double>(p) * f.inv_freq[static_cast<size_t>(i)];
        c[p * half + i] = static_cast<float>(f.attention_factor * std::cos(angle));
        s[p * half + i] = static_cast<float>(f.attention_factor * std::sin(angle));
      }
    }
  });
  return t;
}

RopeTable RopeTable::build(int64_t head_dim, int64_t max_seq, double theta,
                           std::optional<RopeScaling> scaling) {
  return build({.head_dim = head_dim,
                .rotary_dim = head_dim,
                .theta = theta,
                .scaling = scaling ? RopeScalingRule(*scaling) : RopeScalingRule()},
               max_seq);
}

Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, int64_t start_pos) {
  const OpSpan span("rope", x);
  if (x.is_lazy())
    TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, "rope: x must be f32 or f64, got ", x.desc());
  else
    check_float("rope", "x", x);
  TITAN_CHECK(table.cos.defined() && table.sin.defined(),
              "rope: the RopeTable is empty; make it with RopeTable::build");
  TITAN_CHECK(table.rotary_dim > 0 && table.rotary_dim % 2 == 0 && table.rotary_dim <= table.head_dim &&
                  table.cos.dtype() == kF32 && table.cos.dim() == 2 &&
                  table.cos.size(1) == table.rotary_dim / 2 && table.sin.sizes() == table.cos.sizes() &&
                  table.sin.dtype() == kF32 && table.cos.is_contiguous() && table.sin.is_contiguous(),
              "rope: malformed table: head_dim ", table.head_dim, ", rotary_dim ", table.rotary_dim, ", cos ",
              table.cos.desc(), ", sin ", table.sin.desc(),
              "; expected an even rotary_dim within head_dim and contiguous f32 [max_seq, rotary_dim / 2]");
  check_cpu("rope", table.cos);
  check_cpu("rope", table.sin);
  TITAN_CHECK(x.dim() == 4 && x.size(3) == table.head_dim,
              "rope: expected x as [batch, seq, heads, head_dim] with head_dim ", table.head_dim,
              " (the table's), got ", x.desc());
  const int64_t max_seq = table.cos.size(0);
  TITAN_CHECK(start_pos >= 0 && start_pos + x.size(1) <= max_seq, "rope: positions ", start_pos, " to ",
              start_pos + x.size(1) - 1, " of x ", x.desc(), " are outside the table's max_seq ", max_seq,
              " (cos ", table.cos.desc(), ")");
  if (x.is_lazy()) return rope_lowered(x, table, layout, start_pos, Tensor());
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.sizes(), x.options());
  rotate(xc, out, table, layout, start_pos, /*transpose=*/false);
  autograd::record("rope", {x}, {out}, [table, layout, start_pos](const autograd::GradContext& g) {
    Tensor gy = g[0].contiguous();
    Tensor gx = Tensor::empty(gy.sizes(), gy.options());
    rotate(gy, gx, table, layout, start_pos, /*transpose=*/true);
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, const Tensor& start) {
  TITAN_CHECK(start.defined() && start.dim() == 0 && start.dtype() == kI64,
              "rope: the start position must be a 0-d i64 tensor, got ",
              start.defined() ? start.desc() : std::string("none"));
  if (!start.is_lazy()) return rope(x, table, layout, static_cast<int64_t>(start.item()));
  TITAN_CHECK(x.is_lazy() && (x.dtype() == kF32 || x.dtype() == kF64) && x.dim() == 4 &&
                  x.size(3) == table.head_dim && table.cos.defined() && x.size(1) <= table.cos.size(0),
              "rope: a start position that is a value of the program being captured needs x there too, f32 or "
              "f64 [batch, seq, heads, head_dim ",
              table.head_dim, "] with seq within the table's ",
              table.cos.defined() ? table.cos.size(0) : 0, " positions; got x ", x.desc());
  const OpSpan span("rope", x);
  return rope_lowered(x, table, layout, 0, start);
}

}  // namespace titan::ops
