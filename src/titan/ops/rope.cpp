#include "titan/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
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

// Llama 3.1 ("rope_type": "llama3"): frequencies whose wavelength fits many times in the original
// context keep their value, those longer than it are slowed by `factor`, and the band between
// blends the two linearly in original_max_position / wavelength.
double llama3_scaled(double freq, const RopeScaling& s) {
  const double orig = static_cast<double>(s.original_max_position);
  const double wavelen = 2 * std::numbers::pi / freq;
  if (wavelen < orig / s.high_freq_factor) return freq;
  if (wavelen > orig / s.low_freq_factor) return freq / s.factor;
  const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * freq / s.factor + smooth * freq;
}

void rotate(const Tensor& x, const Tensor& out, const RopeTable& table, RopeLayout layout, int64_t start_pos,
            bool inverse) {
  kernels::cpu::RopeGeometry geo{x.size(0), x.size(1), x.size(2), x.size(3), start_pos};
  const bool interleaved = layout == RopeLayout::interleaved;
  const float* c = table.cos.data<float>();
  const float* s = table.sin.data<float>();
  if (x.dtype() == kF32)
    kernels::cpu::rope<float>(x.data<float>(), out.data<float>(), c, s, geo, interleaved, inverse);
  else
    kernels::cpu::rope<double>(x.data<double>(), out.data<double>(), c, s, geo, interleaved, inverse);
}

namespace hlo = graph::hlo;
using graph::Value;

// The kernel's rotation of x [batch, seq, heads, head_dim] by cos/sin [seq, half] (sin negated for
// the inverse): pair (a, b) -> (a c - b s, b c + a s).
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
  Tensor out = graph::tensor_of(rotated(xv, c, s, layout));
  Tensor cd = graph::tensor_of(c), sd = graph::tensor_of(s);
  autograd::record("rope", {x}, {out}, [cd, sd, layout](const autograd::GradContext& g) {
    const Value minus_sin = hlo::neg(graph::value_of(sd, "rope"));
    return std::vector<Tensor>{graph::tensor_of(
        rotated(graph::value_of(g[0], "rope backward"), graph::value_of(cd, "rope"), minus_sin, layout))};
  });
  return out;
}

}  // namespace

RopeTable RopeTable::build(int64_t head_dim, int64_t max_seq, double theta,
                           std::optional<RopeScaling> scaling) {
  TITAN_CHECK(head_dim > 0 && head_dim % 2 == 0,
              "RopeTable::build: head_dim must be positive and even (dims rotate in pairs), got ", head_dim);
  TITAN_CHECK(max_seq > 0, "RopeTable::build: max_seq must be positive, got ", max_seq);
  TITAN_CHECK(theta > 0, "RopeTable::build: theta must be positive, got ", theta);
  if (scaling) {
    TITAN_CHECK(scaling->factor > 0 && scaling->original_max_position > 0 && scaling->low_freq_factor > 0 &&
                    scaling->high_freq_factor > scaling->low_freq_factor,
                "RopeTable::build: llama3 scaling needs factor > 0, original_max_position > 0 and "
                "0 < low_freq_factor < high_freq_factor; got factor ",
                scaling->factor, ", original_max_position ", scaling->original_max_position,
                ", low_freq_factor ", scaling->low_freq_factor, ", high_freq_factor ",
                scaling->high_freq_factor);
  }
  // Computed here, whole on every rank, from nothing a rank's shard decides: real even while a
  // model is built under a MetaScope.
  const MetaScope real(false);
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
    inv_freq[static_cast<size_t>(i)] = scaling ? llama3_scaled(f, *scaling) : f;
  }
  RopeTable t{Tensor::empty({max_seq, half}), Tensor::empty({max_seq, half}), head_dim};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  parallel_for(0, max_seq, std::max<int64_t>(1, 4096 / half), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        // The angle in f64: in f32 it would be off by ~pos * 6e-8 radians at long positions.
        const double angle = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
        c[p * half + i] = static_cast<float>(std::cos(angle));
        s[p * half + i] = static_cast<float>(std::sin(angle));
      }
    }
  });
  return t;
}

Tensor rope(const Tensor& x, const RopeTable& table, RopeLayout layout, int64_t start_pos) {
  const OpSpan span("rope", x);
  if (x.is_lazy())
    TITAN_CHECK(x.dtype() == kF32 || x.dtype() == kF64, "rope: x must be f32 or f64, got ", x.desc());
  else
    check_float("rope", "x", x);
  TITAN_CHECK(table.cos.defined() && table.sin.defined(),
              "rope: the RopeTable is empty; make it with RopeTable::build");
  const int64_t half = table.head_dim / 2;
  TITAN_CHECK(table.head_dim > 0 && table.head_dim % 2 == 0 && table.cos.dtype() == kF32 &&
                  table.cos.dim() == 2 && table.cos.size(1) == half &&
                  table.sin.sizes() == table.cos.sizes() && table.sin.dtype() == kF32 &&
                  table.cos.is_contiguous() && table.sin.is_contiguous(),
              "rope: malformed table: head_dim ", table.head_dim, ", cos ", table.cos.desc(), ", sin ",
              table.sin.desc(), "; expected an even head_dim and contiguous f32 [max_seq, head_dim / 2]");
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
  rotate(xc, out, table, layout, start_pos, false);
  autograd::record("rope", {x}, {out}, [table, layout, start_pos](const autograd::GradContext& g) {
    Tensor gy = g[0].contiguous();
    Tensor gx = Tensor::empty(gy.sizes(), gy.options());
    rotate(gy, gx, table, layout, start_pos, true);
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
