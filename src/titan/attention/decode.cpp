#include "titan/attention/decode.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/attention/scores.h"
#include "titan/autograd/node.h"
#include "titan/core/parallel.h"
#include "titan/graph/lazy.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/checks.h"

namespace titan::attention {

namespace {

using kernels::cpu::gemm;

// Query rows per score block, as in the reference path: a block's scores stay in cache between
// the two GEMMs around the softmax.
constexpr int64_t kRowBlock = 64;

struct Geometry {
  int64_t B, Sq, Skv, Hq, Hkv, D;
  int64_t kv_batch_stride;  // elements between batch rows of k and v (a cache's max_len * Hkv * D)
  int64_t window_left;      // -1: no window

  int64_t start() const { return Skv - Sq; }  // position of query row 0
  // The first key that query row r sees.
  int64_t first_key(int64_t r) const {
    return window_left < 0 ? 0 : std::max<int64_t>(0, start() + r - window_left);
  }
  int64_t group() const { return Hq / Hkv; }
  int64_t q_offset(int64_t b, int64_t h) const { return (b * Sq * Hq + h) * D; }
  int64_t kv_offset(int64_t b, int64_t h) const { return b * kv_batch_stride + (h / group()) * D; }
  int64_t q_ld() const { return Hq * D; }
  int64_t kv_ld() const { return Hkv * D; }
};

// out = softmax(scores(q k^T), over the keys each query row sees) v for every (b, h), a block of
// query rows at a time.
template <typename T>
void decode_heads(const Geometry& g, const Scores& rule, const T* q, const T* k, const T* v, T* out) {
  const T scale = T(rule.scale), cap = T(rule.softcap.value_or(0.0));
  // A decoding step is tiny per head (Skv x D multiply-adds, twice): heads are grouped so that a
  // task is worth waking a thread for.
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, g.Sq * g.Skv * g.D));
  parallel_for(0, g.B * g.Hq, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> scores(static_cast<size_t>(std::min(kRowBlock, g.Sq) * g.Skv));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / g.Hq, h = bh % g.Hq;
      const T* qh = q + g.q_offset(b, h);
      const T* kh = k + g.kv_offset(b, h);
      const T* vh = v + g.kv_offset(b, h);
      T* oh = out + g.q_offset(b, h);
      for (int64_t r0 = 0; r0 < g.Sq; r0 += kRowBlock) {
        // Rows r0..r1-1 see keys from the first row's first key up to the last row's position.
        const int64_t r1 = std::min(g.Sq, r0 + kRowBlock), m = r1 - r0, k0 = g.first_key(r0),
                      n = g.start() + r1 - k0;
        T* p = scores.data();
        gemm<T>(false, true, m, n, g.D, scale, qh + r0 * g.q_ld(), g.q_ld(), kh + k0 * g.kv_ld(), g.kv_ld(),
                T(0), p, n);
        for (int64_t r = r0; r < r1; ++r) {
          T* row = p + (r - r0) * n;
          const int64_t first = g.first_key(r) - k0, end = g.start() + r + 1 - k0;
          if (cap != T(0)) cap_scores(row + first, end - first, cap);
          kernels::cpu::softmax_fwd<T>(kernels::cpu::SoftmaxKind::softmax, row + first, row + first, 1,
                                       end - first);
          std::fill(row, row + first, T(0));
          std::fill(row + end, row + n, T(0));
        }
        gemm<T>(false, false, m, g.D, n, T(1), p, n, vh + k0 * g.kv_ld(), g.kv_ld(), T(0), oh + r0 * g.q_ld(),
                g.q_ld());
      }
    }
  });
}

// `t` itself when each position's [heads, D] is dense and only the batch stride is free, else a
// dense copy.
Tensor rows_dense(const Tensor& t) {
  const bool ok = t.stride(3) == 1 && t.stride(2) == t.size(3) && t.stride(1) == t.size(2) * t.size(3);
  return ok ? t.detach() : ops::dense(t);
}

namespace hlo = graph::hlo;
namespace ffi = graph::pjrt::ffi;
using graph::Value;

constexpr char kDecodeTarget[] = "titan_decode_attention";
constexpr const char* kOp = "decode_attention";

// The custom call: q [B, Sq, Hq, D], k and v [B, L, Hkv, D] (the cache's buffers, read in place)
// and start (i64 scalar) give out [B, Sq, Hq, D], the kernel over keys [0, start + Sq). Its
// attributes are DecodeOptions' fields that are set (attrs_of); one left out is unset.
void decode_kernel(const ffi::Call& call) {
  TITAN_CHECK(call.num_args() == 4 && call.num_results() == 1, kDecodeTarget,
              " takes q, k, v and the position and gives out, got ", call.num_args(), " arguments and ",
              call.num_results(), " results");
  const ffi::Array q = call.arg(0), k = call.arg(1), v = call.arg(2), start = call.arg(3), out = call.result(0);
  TITAN_CHECK(q.dims.size() == 4 && k.dims.size() == 4 && k.dims == v.dims && q.dims[0] == k.dims[0] &&
                  q.dims[3] == k.dims[3] && k.dims[2] > 0 && q.dims[2] % k.dims[2] == 0 && out.dims == q.dims &&
                  start.dims.empty() && k.dtype == q.dtype && v.dtype == q.dtype && out.dtype == q.dtype,
              kDecodeTarget, ": wants q [B, Sq, Hq, D], k and v [B, L, Hkv, D] of q's dtype with Hkv dividing Hq, a "
              "scalar position and out of q's shape, got q ", shape_str(q.dims), ", k ", shape_str(k.dims), ", v ",
              shape_str(v.dims), ", position ", shape_str(start.dims), ", out ", shape_str(out.dims),
              ": the program's custom_call was written wrong");
  const int64_t s = *start.as<int64_t>("position"), Sq = q.dims[1], L = k.dims[1];
  TITAN_CHECK(s >= 0 && s + Sq <= L, kDecodeTarget, ": ", Sq, " queries at position ", s,
              " run past the cache's ", L, " positions");
  const std::optional<double> left = call.optional_scalar_attr("window_left");
  const int64_t window_left = left ? static_cast<int64_t>(*left) : -1;
  const Geometry g{q.dims[0], Sq, s + Sq, q.dims[2], k.dims[2], q.dims[3], L * k.dims[2] * k.dims[3], window_left};
  const Scores rule = scores_for(kDecodeTarget, g.D, call.optional_scalar_attr("scale"),
                                 call.optional_scalar_attr("softcap"));
  TITAN_CHECK(q.dtype == kF32 || q.dtype == kF64, kDecodeTarget, ": q is ", dtype_name(q.dtype),
              "; the kernel takes f32 or f64");
  kernels::cpu::dispatch_float(q.dtype, [&](auto z) {
    using T = decltype(z);
    decode_heads<T>(g, rule, q.as<T>("q"), k.as<T>("k"), v.as<T>("v"), out.as<T>("out"));
  });
}

std::vector<std::pair<std::string, double>> attrs_of(const DecodeOptions& opts) {
  std::vector<std::pair<std::string, double>> attrs;
  if (opts.scale) attrs.emplace_back("scale", *opts.scale);
  if (opts.softcap) attrs.emplace_back("softcap", *opts.softcap);
  if (opts.window_left) attrs.emplace_back("window_left", static_cast<double>(*opts.window_left));
  return attrs;
}

// Heads grouped by the kv head they read, as the kernel reads them: scores [B, Hkv, Sq, G, Skv]
// from one product with batch dims (B, Hkv), so k and v are never repeated per query head.
Tensor decode_lowered(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& start,
                      const DecodeOptions& opts) {
  if (graph::current_program().custom_kernels()) {
    const Value at = start.is_lazy() ? graph::value_of(start, "decode_attention's start")
                                     : hlo::scalar(start.item(), kI64);
    const Value qv = graph::value_of(q, "decode_attention");
    return graph::tensor_of(hlo::custom_call(
        kDecodeTarget,
        {qv, graph::value_of(k, "decode_attention"), graph::value_of(v, "decode_attention"), at},
        {{qv.shape, qv.dtype, false}}, attrs_of(opts))[0]);
  }
  const int64_t B = q.size(0), Sq = q.size(1), Hq = q.size(2), D = q.size(3), Skv = k.size(1), Hkv = k.size(2);
  const int64_t G = Hq / Hkv;
  const DType dtype = q.dtype();
  const Value qv = hlo::reshape(graph::value_of(q, "decode_attention"), {B, Sq, Hkv, G, D});
  const Value kv = graph::value_of(k, "decode_attention"), vv = graph::value_of(v, "decode_attention");
  const Shape shape{B, Hkv, Sq, G, Skv};
  const Scores rule = scores_for(kOp, D, opts.scale, opts.softcap);
  const Value scores =
      capped(rule, hlo::mul(hlo::dot_general(qv, kv, {0, 2}, {0, 2}, {4}, {3}, dtype), rule.scale));
  const Value first =
      start.is_lazy() ? graph::value_of(start, "decode_attention's start") : hlo::scalar(start.item(), kI64);
  // Each query's position, and the keys it sees: those up to it, within the window if any.
  const Value position = hlo::add(hlo::iota(shape, 2, kI64), hlo::broadcast_in_dim(first, shape, {}));
  const Value key = hlo::iota(shape, 4, kI64);
  Value seen = hlo::compare(key, position, "LE");
  if (opts.window_left)
    seen = hlo::logical_and(
        seen, hlo::compare(key, hlo::add(position, -static_cast<double>(*opts.window_left)), "GE"));
  const Value masked = hlo::select(seen, scores, hlo::constant(-std::numeric_limits<double>::infinity(), shape, dtype));
  const Value e = hlo::exp(hlo::sub(masked, hlo::broadcast_to(hlo::max_keep(masked, 4), shape)));
  const Value p = hlo::div(e, hlo::broadcast_to(hlo::sum_keep(e, 4), shape));
  const Value out = hlo::dot_general(p, vv, {0, 1}, {0, 2}, {4}, {1}, dtype);  // [B, Hkv, Sq, G, D]
  return graph::tensor_of(hlo::reshape(hlo::transpose(out, {0, 2, 1, 3, 4}), {B, Sq, Hq, D}));
}

// What both forms need of q, k, v and the options: shapes that fit, whole groups of query heads,
// one dtype, no gradient wanted (there is no backward), a window of at least the query itself and
// scores_for's scale and cap.
void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const DecodeOptions& opts) {
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(3) == k.size(3) && q.size(3) > 0 && q.size(1) >= 1 && q.size(1) <= k.size(1),
              kOp, ": expected q [B, Sq, Hq, D] and k, v [B, Skv, Hkv, D] with the same B and D > 0 and ",
              "1 <= Sq <= Skv, got q ", q.desc(), ", k ", k.desc(), ", v ", v.desc());
  TITAN_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, kOp, ": query heads (", q.size(2),
              ") must be a multiple of key/value heads (", k.size(2), "); q ", q.desc(), ", k ", k.desc());
  TITAN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp, ": q, k and v must share a dtype, got ",
              q.desc(), ", ", k.desc(), ", ", v.desc(), "; cast with .to()");
  TITAN_CHECK(!autograd::needs_grad({&q, &k, &v}), kOp,
              ": an input requires grad, but this inference kernel has no backward; run it under "
              "autograd::NoGradGuard, or train through splash_attention / attention_reference");
  TITAN_CHECK(!opts.window_left || *opts.window_left >= 0, kOp,
              ": window_left must be >= 0 (the keys before the query that it sees), got ",
              opts.window_left.value_or(0), "; leave it unset for no window");
  scores_for(kOp, q.size(3), opts.scale, opts.softcap);
}

// A start position held on the host, checked against the keys the queries after it need.
int64_t host_start(const Tensor& q, const Tensor& k, const Tensor& start) {
  const auto s = static_cast<int64_t>(start.item());
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && s >= 0 && s + q.size(1) <= k.size(1), kOp, ": queries ", q.desc(),
              " at position ", s, " need keys up to ", s + q.size(1), ", but k ", k.desc(), " holds ",
              k.dim() == 4 ? k.size(1) : 0);
  return s;
}

}  // namespace

Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const DecodeOptions& opts) {
  ops::check_float(kOp, "q", q);
  ops::check_float(kOp, "k", k);
  ops::check_float(kOp, "v", v);
  check_inputs(q, k, v, opts);

  Tensor qc = ops::dense(q), kc = rows_dense(k), vc = rows_dense(v);
  // One batch stride serves both: equal when they come from one cache (else v is made dense too).
  if (vc.stride(0) != kc.stride(0)) {
    kc = ops::dense(k);
    vc = ops::dense(v);
  }
  const int64_t window_left = opts.window_left.value_or(-1);
  const Geometry g{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), kc.stride(0), window_left};
  const Scores rule = scores_for(kOp, g.D, opts.scale, opts.softcap);
  Tensor out = Tensor::empty(q.sizes(), q.options());
  kernels::cpu::dispatch_float(q.dtype(), [&](auto z) {
    using T = decltype(z);
    decode_heads<T>(g, rule, qc.data<T>(), kc.data<T>(), vc.data<T>(), out.data<T>());
  });
  return out;
}

Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& start,
                        const DecodeOptions& opts) {
  TITAN_CHECK(start.defined() && start.dim() == 0 && start.dtype() == kI64, kOp,
              ": the queries' start position must be a 0-d i64 tensor, got ",
              start.defined() ? start.desc() : std::string("none"));
  if (!graph::any_lazy({&q, &k, &v, &start})) {
    const int64_t seen = host_start(q, k, start) + q.size(1);
    return decode_attention(q, k.narrow(1, 0, seen), v.narrow(1, 0, seen), opts);
  }
  check_inputs(q, k, v, opts);
  TITAN_CHECK(q.dtype() == kF32 || q.dtype() == kF64, kOp, ": q, k and v must be f32 or f64, got ", q.desc());
  if (!start.is_lazy()) host_start(q, k, start);
  return decode_lowered(q, k, v, start, opts);
}

void register_decode_call(const graph::pjrt::Plugin& plugin) {
  ffi::register_handler(plugin, kDecodeTarget, ffi::handler<decode_kernel>);
}

}  // namespace titan::attention
