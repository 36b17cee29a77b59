#include "titan/attention/splash_lowering.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "titan/attention/cudnn_attention.h"
#include "titan/attention/splash_custom_call.h"
#include "titan/autograd/node.h"
#include "titan/graph/lazy.h"

namespace titan::attention {

namespace {

using graph::Value;
namespace hlo = graph::hlo;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Heads are grouped by the kv head they read: q-like values are [B, Hkv, G, S, D], k-like ones
// [B, Hkv, S, D] and per-row statistics [B, Hkv, G, S], so that one product with batch dims
// (B, Hkv) serves a whole group without repeating k or v.
struct Setup {
  int64_t B = {}, S = {}, Hq = {}, Hkv = {}, D = {};
  Scores scores = {};
  DType dtype = {};    // of the inputs, outputs, gradients and softmax statistics
  DType operand = {};  // of the products' operands
  BlockMask mask;
  bool blocked = false;      // the tiled form (else one dense tile)
  bool keys_padded = false;  // the tiled form's keys run past S to whole tiles

  int64_t G() const { return Hq / Hkv; }
  Shape rows(int64_t n) const { return {B, Hkv, G(), n}; }
  Shape q_rows(int64_t n) const { return {B, Hkv, G(), n, D}; }
  Shape kv_rows(int64_t n) const { return {B, Hkv, n, D}; }
};

Value q_layout(const Setup& s, const Tensor& x, const char* op) {
  return hlo::transpose(hlo::reshape(graph::value_of(x, op), {s.B, s.S, s.Hkv, s.G(), s.D}), {0, 2, 3, 1, 4});
}
Value kv_layout(const Tensor& x, const char* op) {
  return hlo::transpose(graph::value_of(x, op), {0, 2, 1, 3});
}
// The first S rows of a (possibly padded) q-like / k-like value, back in [B, S, H, D].
Tensor q_tensor(const Setup& s, const Value& x) {
  const Value t = hlo::transpose(hlo::narrow(x, 3, 0, s.S), {0, 3, 1, 2, 4});
  return graph::tensor_of(hlo::reshape(t, {s.B, s.S, s.Hq, s.D}));
}
Tensor kv_tensor(const Setup& s, const Value& x) {
  return graph::tensor_of(hlo::transpose(hlo::narrow(x, 2, 0, s.S), {0, 2, 1, 3}));
}

// x with zero rows appended along `dim` up to `len`: tiles then never run past the end (a
// dynamic_slice would clamp its start instead).
Value pad(const Value& x, int64_t dim, int64_t len) {
  const int64_t have = x.shape[static_cast<size_t>(dim)];
  if (have == len) return x;
  Shape zeros = x.shape;
  zeros[static_cast<size_t>(dim)] = len - have;
  return hlo::concatenate({x, hlo::constant(0.0, zeros, x.dtype)}, dim);
}

Value i64(int64_t x) {
  return hlo::scalar(static_cast<double>(x), kI64);
}
Value times(const Value& i, int64_t n) {
  return hlo::mul(i, static_cast<double>(n));
}

// A per-row statistic [B, Hkv, G, n] stretched over a tile's last dim.
Value per_row(const Value& stat, const Shape& shape) {
  return hlo::broadcast_in_dim(stat, shape, {0, 1, 2, 3});
}
// -inf (a row that has seen no key) as 0, so that subtracting it leaves exp(-inf) = 0, not NaN.
Value finite_or_zero(const Value& x) {
  const Value minus_inf = hlo::constant(-kInf, x.shape, x.dtype);
  return hlo::select(hlo::compare(x, minus_inf, "EQ"), hlo::constant(0.0, x.shape, x.dtype), x);
}

// The scores of a tile (scale * q k^T, capped where they have a cap; q [B, Hkv, G, n, D] from query
// q0, k [B, Hkv, m, D] from key k0, both operands), with the pairs the rule hides, and keys past
// the sequence, at -inf.
Value masked_scores(const Setup& s, const Value& q, const Value& k, const Value& q0, const Value& k0) {
  const int64_t n = q.shape[3], m = k.shape[2];
  const Value scores =
      capped(s.scores, hlo::mul(hlo::dot_general(q, k, {0, 1}, {0, 1}, {4}, {3}, s.dtype), s.scores.scale));
  auto positions = [](const Value& start, int64_t len) {
    return hlo::add(hlo::iota({len}, 0, kI64), hlo::broadcast_in_dim(start, {len}, {}));
  };
  const Value keys = positions(k0, m);
  Value seen = s.mask.mask().visible(positions(q0, n), keys);
  if (s.keys_padded) {
    const Value real = hlo::compare(keys, hlo::constant(static_cast<double>(s.S), {m}, kI64), "LT");
    seen = hlo::logical_and(seen, hlo::broadcast_in_dim(real, seen.shape, {2}));
  }
  return hlo::select(hlo::broadcast_in_dim(seen, scores.shape, {0, 3, 4}), scores,
                     hlo::constant(-kInf, scores.shape, s.dtype));
}

// Online softmax over key tiles: each row's running max, sum of exps and exps times v so far.
struct Running {
  Value max = {}, sum = {}, acc = {};
};

Running start(const Setup& s, int64_t n) {
  return {hlo::constant(-kInf, s.rows(n), s.dtype), hlo::constant(0.0, s.rows(n), s.dtype),
          hlo::constant(0.0, s.q_rows(n), s.dtype)};
}

// Folds one tile of scores [B, Hkv, G, n, m] and its values v [B, Hkv, m, D] (operand) in,
// rescaling what the rows gathered so far to the new running max. The exps enter P V as they
// are, normalised only at the end, as splash's kernel does.
Running absorb(const Setup& s, const Running& r, const Value& scores, const Value& v) {
  const Value top = hlo::max(r.max, hlo::reduce_max(scores, {4}));
  const Value shift = finite_or_zero(top);
  const Value alpha = hlo::exp(hlo::sub(r.max, shift));
  const Value e = hlo::exp(hlo::sub(scores, per_row(shift, scores.shape)));
  const Value sum = hlo::add(hlo::mul(r.sum, alpha), hlo::reduce_sum(e, {4}));
  const Value pv = hlo::dot_general(hlo::convert(e, s.operand), v, {0, 1}, {0, 1}, {4}, {2}, s.dtype);
  return {top, sum, hlo::add(hlo::mul(r.acc, per_row(alpha, r.acc.shape)), pv)};
}

// out = acc / sum and lse = max + log(sum); a row that saw no key gets out 0 and lse -inf.
std::pair<Value, Value> finish(const Running& r) {
  const Value zero = hlo::constant(0.0, r.sum.shape, r.sum.dtype);
  const Value sum =
      hlo::select(hlo::compare(r.sum, zero, "EQ"), hlo::constant(1.0, r.sum.shape, r.sum.dtype), r.sum);
  return {hlo::div(r.acc, per_row(sum, r.acc.shape)), hlo::add(finite_or_zero(r.max), hlo::log(r.sum))};
}

// The gradients of one tile. lse has +inf for rows that saw no key, so their P is 0; delta is
// rowsum(dO * O). dq [B, Hkv, G, n, D]; dk and dv [B, Hkv, m, D], summed over the group's heads.
struct Grads {
  Value dq = {}, dk = {}, dv = {};
};

Grads tile_grads(const Setup& s, const Value& q, const Value& k, const Value& v, const Value& dout,
                 const Value& lse, const Value& delta, const Value& q0, const Value& k0) {
  const Value scores = masked_scores(s, q, k, q0, k0);
  const Value p = hlo::exp(hlo::sub(scores, per_row(lse, scores.shape)));
  const Value dp = hlo::dot_general(dout, v, {0, 1}, {0, 1}, {4}, {3}, s.dtype);
  const Value ds = hlo::convert(
      capped_grad(s.scores, scores, hlo::mul(p, hlo::sub(dp, per_row(delta, dp.shape)))), s.operand);
  const Value p_op = hlo::convert(p, s.operand);
  return {hlo::mul(hlo::dot_general(ds, k, {0, 1}, {0, 1}, {4}, {2}, s.dtype), s.scores.scale),
          hlo::mul(hlo::dot_general(ds, q, {0, 1}, {0, 1}, {2, 3}, {2, 3}, s.dtype), s.scores.scale),
          hlo::dot_general(p_op, dout, {0, 1}, {0, 1}, {2, 3}, {2, 3}, s.dtype)};
}

Value entry(const Value& table, const Value& i) {
  return hlo::reshape(hlo::dynamic_slice(table, {i}, {1}), {});
}

// The key blocks [first, last) that query block qb may see in any batch row: the loop over a
// query block's keys runs over these only (the causal upper triangle is never visited).
struct KeyRange {
  Value first = {}, last = {};
};
KeyRange key_ranges(const BlockMask& bm) {
  std::vector<int64_t> first, last;
  for (int64_t qb = 0; qb < bm.num_q_blocks(); ++qb) {
    int64_t lo = bm.num_kv_blocks(), hi = 0;
    for (int64_t b = 0; b < bm.batch(); ++b)
      for (auto list : {bm.full_kv(b, qb), bm.partial_kv(b, qb)})
        if (!list.empty()) {
          lo = std::min<int64_t>(lo, list.front());
          hi = std::max<int64_t>(hi, list.back() + 1);
        }
    first.push_back(std::min(lo, hi));
    last.push_back(hi);
  }
  return {hlo::constant_i64(first), hlo::constant_i64(last)};
}

// for i in [begin, end): state = body(i, state).
std::vector<Value> loop(
    const Value& begin, const Value& end, const std::vector<Value>& state,
    const std::function<std::vector<Value>(const Value&, const std::vector<Value>&)>& body) {
  std::vector<Value> full{begin, end};
  full.insert(full.end(), state.begin(), state.end());
  std::vector<Value> out = hlo::while_loop(
      full, [](const std::vector<Value>& s) { return hlo::compare(s[0], s[1], "LT"); },
      [&](const std::vector<Value>& s) {
        std::vector<Value> next{hlo::add(s[0], 1.0), s[1]};
        const std::vector<Value> inner = body(s[0], {s.begin() + 2, s.end()});
        next.insert(next.end(), inner.begin(), inner.end());
        return next;
      });
  return {out.begin() + 2, out.end()};
}

// What backward needs of forward: the operands, the output and each row's logsumexp, all with
// `rows` query rows (S, or S padded to whole tiles) and keys padded to whole tiles.
struct Saved {
  Value q = {}, k = {}, v = {}, out = {}, lse = {};
};

Saved dense_forward(const Setup& s, const Value& q, const Value& k, const Value& v) {
  const Value zero = i64(0);
  const auto [out, lse] = finish(absorb(s, start(s, s.S), masked_scores(s, q, k, zero, zero), v));
  return {q, k, v, out, lse};
}

Saved blocked_forward(const Setup& s, const Value& q_in, const Value& k_in, const Value& v_in) {
  const BlockMask& bm = s.mask;
  const int64_t bq = bm.block_q(), bk = bm.block_kv(), nq = bm.num_q_blocks();
  const Value q = pad(q_in, 3, nq * bq), k = pad(k_in, 2, bm.num_kv_blocks() * bk),
              v = pad(v_in, 2, bm.num_kv_blocks() * bk);
  const KeyRange keys = key_ranges(bm);
  const Value zero = i64(0);
  const std::vector<Value> result = loop(
      zero, i64(nq),
      {hlo::constant(0.0, s.q_rows(nq * bq), s.dtype), hlo::constant(0.0, s.rows(nq * bq), s.dtype)},
      [&](const Value& i, const std::vector<Value>& st) {
        const Value q0 = times(i, bq);
        const Value qb = hlo::dynamic_slice(q, {zero, zero, zero, q0, zero}, s.q_rows(bq));
        const Running r0 = start(s, bq);
        const std::vector<Value> r = loop(
            entry(keys.first, i), entry(keys.last, i), {r0.max, r0.sum, r0.acc},
            [&](const Value& j, const std::vector<Value>& run) {
              const Value k0 = times(j, bk);
              const Value kb = hlo::dynamic_slice(k, {zero, zero, k0, zero}, s.kv_rows(bk));
              const Value vb = hlo::dynamic_slice(v, {zero, zero, k0, zero}, s.kv_rows(bk));
              const Running next = absorb(s, {run[0], run[1], run[2]}, masked_scores(s, qb, kb, q0, k0), vb);
              return std::vector<Value>{next.max, next.sum, next.acc};
            });
        const auto [out, lse] = finish({r[0], r[1], r[2]});
        return std::vector<Value>{hlo::dynamic_update_slice(st[0], out, {zero, zero, zero, q0, zero}),
                                  hlo::dynamic_update_slice(st[1], lse, {zero, zero, zero, q0})};
      });
  return {q, k, v, result[0], result[1]};
}

// dq, dk, dv (q-like and k-like, padded as `saved`) from dout (q-like, unpadded).
Grads backward(const Setup& s, const Saved& saved, const Value& dout_t) {
  const int64_t rows = saved.out.shape[3];
  const Value dout = pad(dout_t, 3, rows);
  const Value delta = hlo::reduce_sum(hlo::mul(dout, saved.out), {4});
  const Value lse = hlo::select(hlo::compare(saved.lse, hlo::constant(-kInf, saved.lse.shape, s.dtype), "EQ"),
                                hlo::constant(kInf, saved.lse.shape, s.dtype), saved.lse);
  const Value dop = hlo::convert(dout, s.operand), zero = i64(0);
  if (!s.blocked) return tile_grads(s, saved.q, saved.k, saved.v, dop, lse, delta, zero, zero);

  const BlockMask& bm = s.mask;
  const int64_t bq = bm.block_q(), bk = bm.block_kv(), keys_len = saved.k.shape[2];
  const KeyRange keys = key_ranges(bm);
  // One pass over the visible tiles, query blocks outside: dq of a query block is gathered in
  // the loop's state, dk and dv of each key block added into place.
  const std::vector<Value> result = loop(
      zero, i64(bm.num_q_blocks()),
      {hlo::constant(0.0, s.q_rows(rows), s.dtype), hlo::constant(0.0, s.kv_rows(keys_len), s.dtype),
       hlo::constant(0.0, s.kv_rows(keys_len), s.dtype)},
      [&](const Value& i, const std::vector<Value>& st) {
        const Value q0 = times(i, bq);
        const std::vector<Value> q_at{zero, zero, zero, q0, zero}, row_at{zero, zero, zero, q0};
        const Value qb = hlo::dynamic_slice(saved.q, q_at, s.q_rows(bq));
        const Value db = hlo::dynamic_slice(dop, q_at, s.q_rows(bq));
        const Value lb = hlo::dynamic_slice(lse, row_at, s.rows(bq));
        const Value deltab = hlo::dynamic_slice(delta, row_at, s.rows(bq));
        const std::vector<Value> r = loop(
            entry(keys.first, i), entry(keys.last, i),
            {hlo::constant(0.0, s.q_rows(bq), s.dtype), st[1], st[2]},
            [&](const Value& j, const std::vector<Value>& acc) {
              const Value k0 = times(j, bk);
              const std::vector<Value> k_at{zero, zero, k0, zero};
              const Value kb = hlo::dynamic_slice(saved.k, k_at, s.kv_rows(bk));
              const Value vb = hlo::dynamic_slice(saved.v, k_at, s.kv_rows(bk));
              const Grads g = tile_grads(s, qb, kb, vb, db, lb, deltab, q0, k0);
              auto add_at = [&](const Value& whole, const Value& part) {
                return hlo::dynamic_update_slice(
                    whole, hlo::add(hlo::dynamic_slice(whole, k_at, s.kv_rows(bk)), part), k_at);
              };
              return std::vector<Value>{hlo::add(acc[0], g.dq), add_at(acc[1], g.dk), add_at(acc[2], g.dv)};
            });
        return std::vector<Value>{hlo::dynamic_update_slice(st[0], r[0], q_at), r[1], r[2]};
      });
  return {result[0], result[1], result[2]};
}

// Attention as two custom calls to splash's kernels: forward gives out and lse, backward reads
// them with q, k and v.
Tensor called_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                        const SplashCallSpec& spec) {
  const Value qv = graph::value_of(q, op), kv = graph::value_of(k, op), vv = graph::value_of(v, op);
  const std::vector<Value> fwd = splash_forward_call(spec, qv, kv, vv);
  Tensor out = graph::tensor_of(fwd[0]);
  if (!autograd::needs_grad({&q, &k, &v})) return out;
  autograd::record(op, {q, k, v}, {out}, [spec, qv, kv, vv, fwd, op](const autograd::GradContext& ctx) {
    const std::vector<Value> g =
        splash_backward_call(spec, qv, kv, vv, fwd[0], fwd[1], graph::value_of(ctx[0], op));
    std::vector<Tensor> grads;
    for (size_t i = 0; i < 3; ++i) grads.push_back(ctx.needs(i) ? graph::tensor_of(g[i]) : Tensor());
    return grads;
  });
  return out;
}

// Attention as cuDNN's two custom calls, in bf16: out and the gradients return in the dtypes of q,
// k and v. Packed documents' lengths and offsets come from the mask's document ids.
Tensor cudnn_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const CudnnCallSpec& spec,
                       const BlockMask& mask) {
  auto bf16 = [op](const Tensor& t) { return hlo::convert(graph::value_of(t, op), kBF16); };
  const Value qv = bf16(q), kv = bf16(k), vv = bf16(v);
  const CudnnSegments segments =
      spec.documents > 1 ? cudnn_segments(graph::value_of(mask.mask().terms()->document_ids, op), spec.documents,
                                          q.size(2), k.size(2), q.size(3))
                         : CudnnSegments{};
  const CudnnForward fwd = cudnn_forward_call(spec, qv, kv, vv, segments);
  Tensor out = graph::tensor_of(hlo::convert(fwd.out, q.dtype()));
  if (!autograd::needs_grad({&q, &k, &v})) return out;
  autograd::record(op, {q, k, v}, {out},
                   [spec, qv, kv, vv, fwd, op, dtypes = std::vector<DType>{q.dtype(), k.dtype(), v.dtype()}](
                       const autograd::GradContext& ctx) {
                     const Value dout = hlo::convert(graph::value_of(ctx[0], op), kBF16);
                     const std::vector<Value> g = cudnn_backward_call(spec, qv, kv, vv, fwd, dout);
                     std::vector<Tensor> grads;
                     for (size_t i = 0; i < 3; ++i)
                       grads.push_back(ctx.needs(i) ? graph::tensor_of(hlo::convert(g[i], dtypes[i])) : Tensor());
                     return grads;
                   });
  return out;
}

}  // namespace

Tensor lowered_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                         const BlockMask& mask, const Scores& scores, bool bf16_products) {
  graph::Program& program = graph::current_program();
  const AttentionChoice choice =
      choose_attention(program, mask, scores, q.dtype(), bf16_products, q.size(0), q.size(2), k.size(2), q.size(3));
  program.note(choice.note);
  if (choice.form == AttentionForm::titan_kernels) return called_attention(op, q, k, v, *choice.splash);
  if (choice.form == AttentionForm::cudnn) return cudnn_attention(op, q, k, v, *choice.cudnn, mask);
  const int64_t S = q.size(1);
  const bool blocked = choice.form == AttentionForm::tiled;
  const Setup s{.B = q.size(0),
                .S = S,
                .Hq = q.size(2),
                .Hkv = k.size(2),
                .D = q.size(3),
                .scores = scores,
                .dtype = q.dtype(),
                .operand = bf16_products ? kBF16 : q.dtype(),
                .mask = mask,
                .blocked = blocked,
                .keys_padded = blocked && S % mask.block_kv() != 0};
  auto operand = [&](const Value& x) { return hlo::convert(x, s.operand); };
  const Value qo = operand(q_layout(s, q, op)), ko = operand(kv_layout(k, op)),
              vo = operand(kv_layout(v, op));
  const Saved saved = blocked ? blocked_forward(s, qo, ko, vo) : dense_forward(s, qo, ko, vo);
  Tensor out = q_tensor(s, saved.out);
  if (!autograd::needs_grad({&q, &k, &v})) return out;

  autograd::record(op, {q, k, v}, {out}, [s, saved, op](const autograd::GradContext& ctx) {
    const Grads g = backward(s, saved, q_layout(s, ctx[0], op));
    auto wanted = [&](size_t i, Tensor t) { return ctx.needs(i) ? t : Tensor(); };
    return std::vector<Tensor>{wanted(0, q_tensor(s, g.dq)), wanted(1, kv_tensor(s, g.dk)),
                               wanted(2, kv_tensor(s, g.dv))};
  });
  return out;
}

}  // namespace titan::attention
