#include "titan/ops/moe.h"

#include <cmath>
#include <numeric>

#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/grouped_gemm.h"
#include "titan/kernels/cpu/grouped_swiglu.h"
#include "titan/kernels/cpu/index_check.h"
#include "titan/kernels/cpu/moe.h"
#include "titan/ops/checks.h"
#include "titan/ops/custom_calls.h"
#include "titan/ops/linalg.h"
#include "titan/ops/activation.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

using kernels::cpu::gemm_acc_t;

namespace {

void check_permutation(const char* op, const TokenPermutation& perm) {
  TITAN_CHECK(perm.row_of.defined() && perm.row_of.numel() == perm.tokens * perm.top_k, op,
              ": the permutation is empty or inconsistent; make it with sort_by_expert from this routing");
}

namespace hlo = graph::hlo;
using graph::Value;

// [n] -> [n, m], the value repeated along dim 1.
Value across(const Value& v, int64_t m) {
  return hlo::broadcast_in_dim(v, {v.shape[0], m}, {0});
}

// Whether each of ids [n] is expert e, for the experts e of dim 1: [n, experts] predicates.
Value one_hot(const Value& ids, int64_t experts) {
  return hlo::compare(across(ids, experts), hlo::iota({ids.shape[0], experts}, 1, kI64), "EQ");
}

// Each step of the k picks the best expert left by `choice` (the lowest index among equal
// values), as the kernel does, then hides it: max and compare rather than a sort, for small k.
TopKExperts topk_experts_lowered(const Tensor& scores, int64_t k, const Tensor& bias) {
  const int64_t tokens = scores.size(0), experts = scores.size(1);
  const DType dt = scores.dtype();
  const Value s = graph::value_of(scores, "topk_experts");
  Value choice = bias.defined() ? hlo::add(s, hlo::broadcast_in_dim(graph::value_of(bias, "topk_experts"),
                                                                      {tokens, experts}, {1}))
                                : s;
  // Expert e as E - 1 - e, in the scores' dtype, so that the lowest index wins a max.
  const Value reversed = hlo::iota({tokens, experts}, 1, dt);
  const Value last = hlo::scalar(static_cast<double>(experts - 1), dt);
  const Value rank = hlo::sub(hlo::broadcast_to(last, {tokens, experts}), reversed);
  std::vector<Value> ids, weights;
  for (int64_t j = 0; j < k; ++j) {
    const Value best = hlo::compare(choice, across(hlo::reduce_max(choice, {1}), experts), "EQ");
    const Value pick = hlo::reduce_max(hlo::select(best, rank, hlo::constant(-1.0, {tokens, experts}, dt)), {1});
    const Value id = hlo::convert(hlo::sub(hlo::broadcast_to(last, {tokens}), pick), kI64);
    const Value chosen = one_hot(id, experts);
    weights.push_back(hlo::reshape(
        hlo::reduce_sum(hlo::select(chosen, s, hlo::constant(0.0, {tokens, experts}, dt)), {1}), {tokens, 1}));
    ids.push_back(hlo::reshape(id, {tokens, 1}));
    choice = hlo::select(chosen, hlo::constant(-INFINITY, {tokens, experts}, dt), choice);
  }
  TopKExperts out{graph::tensor_of(hlo::concatenate(weights, 1)), graph::tensor_of(hlo::concatenate(ids, 1))};
  autograd::record("topk_experts", {scores}, {out.weights},
                   [ids = out.ids, tokens, experts, k](const autograd::GradContext& g) {
                     const Value gw = graph::value_of(g[0], "topk_experts backward");
                     const Value id = graph::value_of(ids, "topk_experts backward");
                     Value ds = hlo::constant(0.0, {tokens, experts}, gw.dtype);
                     for (int64_t j = 0; j < k; ++j) {
                       const Value column = hlo::reshape(hlo::narrow(id, 1, j, 1), {tokens});
                       const Value grad = across(hlo::reshape(hlo::narrow(gw, 1, j, 1), {tokens}), experts);
                       ds = hlo::select(one_hot(column, experts), grad, ds);
                     }
                     return std::vector<Tensor>{graph::tensor_of(ds)};
                   });
  return out;
}

Value expert_counts_lowered(const Value& flat_ids, int64_t experts) {
  const int64_t n = flat_ids.shape[0];
  return hlo::reduce_sum(hlo::select(one_hot(flat_ids, experts), hlo::constant(1.0, {n, experts}, kI64),
                                     hlo::constant(0.0, {n, experts}, kI64)),
                         {0});
}

// The pairs of flat ids [n] in expert order, by sorting them on (expert, pair): `order` [n] the
// pair at each place, `place` [n] each pair's place (the inverse permutation, by a second sort).
struct ExpertOrder {
  Value order, place;
};
ExpertOrder expert_order_lowered(const Value& flat) {
  const int64_t n = flat.shape[0];
  const Value pair = hlo::iota({n}, 0, kI64);
  const Value order = hlo::sort({hlo::add(hlo::mul(flat, static_cast<double>(n)), pair), pair}, 0)[1];
  return {order, hlo::sort({order, pair}, 0)[1]};
}

TokenPermutation sort_by_expert_lowered(const Tensor& ids, int64_t experts) {
  const int64_t k = ids.size(1), n = ids.numel();
  const Value flat = hlo::reshape(graph::value_of(ids, "sort_by_expert"), {n});
  const ExpertOrder o = expert_order_lowered(flat);
  return {.tokens = ids.size(0),
          .top_k = k,
          .row_of = graph::tensor_of(o.place),
          .token_of_row = graph::tensor_of(hlo::div(o.order, hlo::constant(static_cast<double>(k), {n}, kI64))),
          .tokens_per_expert = GroupSizes(graph::tensor_of(expert_counts_lowered(flat, experts)))};
}

// Where the program runs titan's kernels, the row moves are eager's kernels as custom calls (XLA's
// gathers took 11.4 ms for the forward and backward of both moves at 4096 tokens x 2 choices x 512,
// eager's kernels 2.6 ms). Elsewhere rows are gathered both ways (each pair knows its row, each row
// its token, and the backward of the combine sorts row_of back into each row's pair): no scatter,
// which XLA's CPU backend runs element by element.
bool moves_by_call() {
  return graph::current_program().custom_kernels();
}

Tensor permute_tokens_lowered(const Tensor& x, const TokenPermutation& perm) {
  const Value xv = graph::value_of(x, "permute_tokens"), to = graph::value_of(perm.token_of_row, "permute_tokens");
  const Tensor out = graph::tensor_of(moves_by_call() ? gather_rows_call(xv, to) : hlo::take_rows(xv, to));
  autograd::record("permute_tokens", {x}, {out},
                   [row_of = perm.row_of, tokens = perm.tokens, k = perm.top_k](const autograd::GradContext& g) {
                     const Value gv = graph::value_of(g[0], "permute_tokens backward");
                     const Value r = graph::value_of(row_of, "permute_tokens backward");
                     if (moves_by_call()) return std::vector<Tensor>{graph::tensor_of(combine_rows_call(gv, r, nullptr, tokens))};
                     const Value picked = hlo::take_rows(gv, r);
                     return std::vector<Tensor>{
                         graph::tensor_of(hlo::reduce_sum(hlo::reshape(picked, {tokens, k, gv.shape[1]}), {1}))};
                   });
  return out;
}

Tensor unpermute_tokens_called(const Tensor& rows, const Tensor& weights, const TokenPermutation& perm) {
  const char* op = "unpermute_tokens";
  const Value w = graph::value_of(weights, op);
  const Tensor out = graph::tensor_of(
      combine_rows_call(graph::value_of(rows, op), graph::value_of(perm.row_of, op), &w, perm.tokens));
  autograd::record(op, {rows, weights}, {out}, [rows, weights, row_of = perm.row_of](const autograd::GradContext& g) {
    const char* bwd = "unpermute_tokens backward";
    const std::vector<Value> d = combine_rows_bwd_call(graph::value_of(g[0], bwd), graph::value_of(rows, bwd),
                                                       graph::value_of(row_of, bwd), graph::value_of(weights, bwd));
    return std::vector<Tensor>{g.needs(0) ? graph::tensor_of(d[0]) : Tensor(),
                               g.needs(1) ? graph::tensor_of(d[1]) : Tensor()};
  });
  return out;
}

Tensor unpermute_tokens_lowered(const Tensor& rows, const Tensor& weights, const TokenPermutation& perm) {
  if (moves_by_call()) return unpermute_tokens_called(rows, weights, perm);
  const int64_t tokens = perm.tokens, k = perm.top_k, n = tokens * k, d = rows.size(1);
  const char* op = "unpermute_tokens";
  // Each pair's weight along its row of d.
  auto spread = [n, d](const Value& w) { return hlo::broadcast_in_dim(hlo::reshape(w, {n}), {n, d}, {0}); };
  const Value picked = hlo::take_rows(graph::value_of(rows, op), graph::value_of(perm.row_of, op));
  const Tensor out = graph::tensor_of(hlo::reduce_sum(
      hlo::reshape(hlo::mul(picked, spread(graph::value_of(weights, op))), {tokens, k, d}), {1}));
  autograd::record(
      op, {rows, weights}, {out}, [rows, weights, row_of = perm.row_of, tokens, k, n, d, spread](const autograd::GradContext& g) {
        const char* bwd = "unpermute_tokens backward";
        const Value r = graph::value_of(row_of, bwd);
        // The output gradient of each pair's token: [n, d].
        const Value per_pair =
            hlo::reshape(hlo::broadcast_in_dim(graph::value_of(g[0], bwd), {tokens, k, d}, {0, 2}), {n, d});
        Tensor d_rows, d_w;
        if (g.needs(0)) {
          const Value pair_of_row = hlo::sort({r, hlo::iota({n}, 0, kI64)}, 0)[1];
          d_rows = graph::tensor_of(
              hlo::take_rows(hlo::mul(per_pair, spread(graph::value_of(weights, bwd))), pair_of_row));
        }
        if (g.needs(1)) {
          const Value picked_again = hlo::take_rows(graph::value_of(rows, bwd), r);
          d_w = graph::tensor_of(hlo::reshape(hlo::reduce_sum(hlo::mul(per_pair, picked_again), {1}), {tokens, k}));
        }
        return std::vector<Tensor>{d_rows, d_w};
      });
  return out;
}

// A pair's place among all pairs in expert order, less the pairs of the experts before its own,
// is its place within its expert.
ExpertSlots expert_slots_lowered(const Tensor& ids, int64_t experts, int64_t capacity) {
  const int64_t k = ids.size(1), n = ids.numel();
  const Value flat = hlo::reshape(graph::value_of(ids, "expert_slots"), {n});
  const auto [order, place] = expert_order_lowered(flat);
  const Value counts = expert_counts_lowered(flat, experts);
  const Value before = hlo::compare(hlo::iota({experts, experts}, 1, kI64), hlo::iota({experts, experts}, 0, kI64), "LT");
  const Value offset = hlo::reduce_sum(
      hlo::select(before, hlo::broadcast_in_dim(counts, {experts, experts}, {1}),
                  hlo::constant(0.0, {experts, experts}, kI64)),
      {1});
  const Value within = hlo::sub(place, hlo::reshape(hlo::take_rows(hlo::reshape(offset, {experts, 1}), flat), {n}));
  const Value cap = hlo::constant(static_cast<double>(capacity), {n}, kI64);
  const Value kept = hlo::compare(within, cap, "LT");
  const Value zeros = hlo::constant(0.0, {n}, kI64);
  const Value slot_of_pair = hlo::select(kept, hlo::add(hlo::mul(flat, static_cast<double>(capacity)), within), zeros);
  // Slot (e, c) holds the pair at place offset[e] + c of the expert order, if expert e has a c-th.
  const Shape grid{experts, capacity};
  const Value c = hlo::iota(grid, 1, kI64);
  const Value filled = hlo::compare(c, hlo::broadcast_in_dim(counts, grid, {0}), "LT");
  const Value at = hlo::min(hlo::add(hlo::broadcast_in_dim(offset, grid, {0}), c),
                            hlo::constant(static_cast<double>(n - 1), grid, kI64));
  const Value pair_at = hlo::reshape(hlo::take_rows(hlo::reshape(order, {n, 1}), at), grid);
  const Value token = hlo::select(filled, hlo::div(pair_at, hlo::constant(static_cast<double>(k), grid, kI64)),
                                  hlo::constant(0.0, grid, kI64));
  const Value over = hlo::max(hlo::sub(counts, hlo::constant(static_cast<double>(capacity), {experts}, kI64)),
                              hlo::constant(0.0, {experts}, kI64));
  return {.capacity = capacity,
          .token_of_slot = graph::tensor_of(hlo::reshape(token, {experts * capacity})),
          .slot_of_pair = graph::tensor_of(slot_of_pair),
          .pair_kept = graph::tensor_of(hlo::select(kept, hlo::constant(1.0, {n}, kF32), hlo::constant(0.0, {n}, kF32))),
          .dropped = graph::tensor_of(hlo::reduce_sum(over, {0}))};
}

void check_ids(const char* op, const Tensor& ids, int64_t num_experts) {
  TITAN_CHECK(ids.dim() == 2 && ids.dtype() == kI64, op, ": expected ids [tokens, k] i64, got ", ids.desc());
  TITAN_CHECK(num_experts >= 1, op, ": num_experts must be >= 1, got ", num_experts);
}

}  // namespace

Tensor expert_counts(const Tensor& ids, int64_t num_experts) {
  const OpSpan span("expert_counts", ids);
  check_ids("expert_counts", ids, num_experts);
  if (ids.is_lazy())
    return graph::tensor_of(expert_counts_lowered(hlo::reshape(graph::value_of(ids, "expert_counts"), {ids.numel()}),
                                                  num_experts));
  check_cpu("expert_counts", ids);
  Tensor ic = ids.contiguous();
  kernels::cpu::check_index_range("expert_counts", "expert id", ic, num_experts);
  Tensor counts = Tensor::zeros({num_experts}, {.dtype = kI64});
  const int64_t* id = ic.data<int64_t>();
  int64_t* c = counts.data<int64_t>();
  for (int64_t i = 0; i < ic.numel(); ++i) ++c[id[i]];
  return counts;
}

ExpertSlots expert_slots(const Tensor& ids, int64_t num_experts, int64_t capacity) {
  const OpSpan span("expert_slots", ids);
  check_ids("expert_slots", ids, num_experts);
  TITAN_CHECK(capacity >= 1 && ids.numel() >= 1, "expert_slots: need a capacity >= 1 and at least one pair, got capacity ",
              capacity, " for ids ", ids.desc());
  if (ids.is_lazy()) return expert_slots_lowered(ids, num_experts, capacity);
  check_cpu("expert_slots", ids);
  Tensor ic = ids.contiguous();
  kernels::cpu::check_index_range("expert_slots", "expert id", ic, num_experts);
  ExpertSlots s{.capacity = capacity,
                .token_of_slot = Tensor::empty({num_experts * capacity}, {.dtype = kI64}),
                .slot_of_pair = Tensor::empty({ic.numel()}, {.dtype = kI64}),
                .pair_kept = Tensor::empty({ic.numel()}, {.dtype = kF32}),
                .dropped = Tensor()};
  s.dropped = Tensor::scalar<int64_t>(kernels::cpu::expert_slots(
      ic.data<int64_t>(), ic.size(0), ic.size(1), num_experts, capacity, s.token_of_slot.data<int64_t>(),
      s.slot_of_pair.data<int64_t>(), s.pair_kept.data<float>()));
  return s;
}

TopKExperts topk_experts(const Tensor& scores, int64_t k, const Tensor& bias) {
  const OpSpan span("topk_experts", scores, bias);
  if (graph::any_lazy({&scores, &bias})) {
    TITAN_CHECK(scores.dim() == 2 && k >= 1 && k <= scores.size(1) && (scores.dtype() == kF32 || scores.dtype() == kF64),
                "topk_experts: expected f32 or f64 scores [tokens, experts] and 1 <= k <= experts, got ",
                scores.desc(), " and k = ", k);
    TITAN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == scores.size(1) && bias.dtype() == scores.dtype()),
                "topk_experts: bias must be [", scores.size(1), "] of the scores' dtype, got ", bias.desc());
    return topk_experts_lowered(scores, k, bias);
  }
  check_float("topk_experts", "scores", scores);
  TITAN_CHECK(scores.dim() == 2, "topk_experts: expected scores [tokens, experts], got ", scores.desc());
  const int64_t tokens = scores.size(0), experts = scores.size(1);
  TITAN_CHECK(k >= 1 && k <= experts, "topk_experts: k = ", k, " must be in [1, experts = ", experts,
              "]; choose top_k <= num_experts");
  Tensor bc;
  if (bias.defined()) {
    check_float("topk_experts", "bias", bias);
    TITAN_CHECK(bias.dim() == 1 && bias.size(0) == experts && bias.dtype() == scores.dtype(),
                "topk_experts: bias must be [", experts, "] of the scores' dtype ",
                dtype_name(scores.dtype()), ", got ", bias.desc());
    bc = dense(bias);
  }
  Tensor sc = dense(scores);
  Tensor ids = Tensor::empty({tokens, k}, {.dtype = kI64});
  Tensor weights = Tensor::empty({tokens, k}, scores.options());
  kernels::cpu::dispatch_float(scores.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::topk_experts<T>(sc.data<T>(), bc.defined() ? bc.data<T>() : nullptr, tokens, experts, k,
                                  ids.data<int64_t>(), weights.data<T>());
  });
  autograd::record("topk_experts", {scores}, {weights},
                   [ids, tokens, experts, k](const autograd::GradContext& g) {
                     Tensor gw = g[0].contiguous();
                     Tensor ds = Tensor::empty({tokens, experts}, gw.options());
                     kernels::cpu::dispatch_float(gw.dtype(), [&](auto z) {
                       using T = decltype(z);
                       kernels::cpu::topk_experts_bwd<T>(gw.data<T>(), ids.data<int64_t>(), tokens, experts,
                                                         k, ds.data<T>());
                     });
                     return std::vector<Tensor>{ds};
                   });
  return {weights, ids};
}

TokenPermutation sort_by_expert(const Tensor& ids, int64_t num_experts) {
  const OpSpan span("sort_by_expert", ids);
  check_ids("sort_by_expert", ids, num_experts);
  if (ids.is_lazy()) return sort_by_expert_lowered(ids, num_experts);
  check_cpu("sort_by_expert", ids);
  Tensor ic = ids.contiguous();
  kernels::cpu::check_index_range("sort_by_expert", "expert id", ic, num_experts);
  TokenPermutation p;
  p.tokens = ids.size(0);
  p.top_k = ids.size(1);
  p.row_of = Tensor::empty({p.tokens * p.top_k}, {.dtype = kI64});
  p.token_of_row = Tensor::empty({p.tokens * p.top_k}, {.dtype = kI64});
  p.tokens_per_expert.host.resize(static_cast<size_t>(num_experts));
  kernels::cpu::sort_by_expert(ic.data<int64_t>(), p.tokens, p.top_k, num_experts, p.tokens_per_expert.host.data(),
                               p.row_of.data<int64_t>(), p.token_of_row.data<int64_t>());
  return p;
}

Tensor permute_tokens(const Tensor& x, const TokenPermutation& perm) {
  const OpSpan span("permute_tokens", x);
  if (graph::any_lazy({&x, &perm.token_of_row})) return permute_tokens_lowered(x, perm);
  check_float("permute_tokens", "x", x);
  check_permutation("permute_tokens", perm);
  TITAN_CHECK(x.dim() == 2 && x.size(0) == perm.tokens, "permute_tokens: expected x [", perm.tokens,
              ", d] (one row per routed token), got ", x.desc());
  const int64_t d = x.size(1), rows = perm.tokens * perm.top_k;
  Tensor xc = dense(x);
  Tensor out = Tensor::empty({rows, d}, x.options());
  kernels::cpu::dispatch_float(x.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::gather_rows<T>(xc.data<T>(), perm.token_of_row.data<int64_t>(), rows, d, out.data<T>());
  });
  autograd::record(
      "permute_tokens", {x}, {out},
      [row_of = perm.row_of, tokens = perm.tokens, k = perm.top_k, d](const autograd::GradContext& g) {
        Tensor go = g[0].contiguous();
        Tensor dx = Tensor::empty({tokens, d}, go.options());
        kernels::cpu::dispatch_float(go.dtype(), [&](auto z) {
          using T = decltype(z);
          kernels::cpu::combine_rows<T>(go.data<T>(), row_of.data<int64_t>(), nullptr, tokens, k, d,
                                        dx.data<T>());
        });
        return std::vector<Tensor>{dx};
      });
  return out;
}

Tensor unpermute_tokens(const Tensor& rows, const Tensor& weights, const TokenPermutation& perm) {
  const OpSpan span("unpermute_tokens", rows, weights);
  if (graph::any_lazy({&rows, &weights, &perm.row_of})) return unpermute_tokens_lowered(rows, weights, perm);
  check_float("unpermute_tokens", "rows", rows);
  check_float("unpermute_tokens", "weights", weights);
  check_permutation("unpermute_tokens", perm);
  const int64_t tokens = perm.tokens, k = perm.top_k;
  TITAN_CHECK(rows.dim() == 2 && rows.size(0) == tokens * k, "unpermute_tokens: expected rows [", tokens * k,
              ", d] (tokens x top_k), got ", rows.desc());
  TITAN_CHECK(weights.dim() == 2 && weights.size(0) == tokens && weights.size(1) == k &&
                  weights.dtype() == rows.dtype(),
              "unpermute_tokens: expected weights [", tokens, ", ", k, "] of the rows' dtype, got ",
              weights.desc(), " with rows ", rows.desc());
  const int64_t d = rows.size(1);
  Tensor rc = dense(rows), wc = dense(weights);
  Tensor out = Tensor::empty({tokens, d}, rows.options());
  kernels::cpu::dispatch_float(rows.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::cpu::combine_rows<T>(rc.data<T>(), perm.row_of.data<int64_t>(), wc.data<T>(), tokens, k, d,
                                  out.data<T>());
  });
  autograd::record("unpermute_tokens", {rows, weights}, {out},
                   [rc, wc, row_of = perm.row_of, tokens, k, d](const autograd::GradContext& g) {
                     Tensor go = g[0].contiguous();
                     Tensor d_rows, d_w;
                     if (g.needs(0)) d_rows = Tensor::empty(rc.sizes(), rc.options());
                     if (g.needs(1)) d_w = Tensor::empty(wc.sizes(), wc.options());
                     kernels::cpu::dispatch_float(go.dtype(), [&](auto z) {
                       using T = decltype(z);
                       kernels::cpu::combine_rows_bwd<T>(go.data<T>(), rc.data<T>(), row_of.data<int64_t>(),
                                                         wc.data<T>(), tokens, k, d,
                                                         d_rows.defined() ? d_rows.data<T>() : nullptr,
                                                         d_w.defined() ? d_w.data<T>() : nullptr);
                     });
                     return std::vector<Tensor>{d_rows, d_w};
                   });
  return out;
}

Tensor inverse_permutation(const Tensor& order) {
  TITAN_CHECK(order.dim() == 1 && order.dtype() == kI64, "inverse_permutation: expected [n] i64, got ",
              order.desc());
  const int64_t n = order.numel();
  Tensor oc = order.contiguous();
  kernels::cpu::check_index_range("inverse_permutation", "row", oc, n);
  Tensor inverse = Tensor::empty({n}, {.dtype = kI64});
  const int64_t* to = oc.data<int64_t>();
  int64_t* from = inverse.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) from[to[i]] = i;
  return inverse;
}

Tensor permute_rows(const Tensor& x, const Tensor& order) {
  const OpSpan span("permute_rows", x);
  check_float("permute_rows", "x", x);
  TITAN_CHECK(x.dim() == 2 && order.dim() == 1 && order.dtype() == kI64 && order.size(0) == x.size(0),
              "permute_rows: expected x [n, d] and order [n] i64, got ", x.desc(), " and ", order.desc());
  const int64_t n = x.size(0), d = x.size(1);
  Tensor oc = order.contiguous();
  kernels::cpu::check_index_range("permute_rows", "row", oc, n);
  const Tensor inverse = inverse_permutation(oc);
  auto gather = [n, d](const Tensor& src, const Tensor& index) {
    Tensor sc = dense(src);
    Tensor out = Tensor::empty({n, d}, sc.options());
    kernels::cpu::dispatch_float(sc.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::cpu::gather_rows<T>(sc.data<T>(), index.data<int64_t>(), n, d, out.data<T>());
    });
    return out;
  };
  Tensor out = gather(x, oc);
  autograd::record("permute_rows", {x}, {out}, [gather, inverse](const autograd::GradContext& g) {
    return std::vector<Tensor>{gather(g[0], inverse)};
  });
  return out;
}

namespace {
// x [rows, in], weight [groups, out, in] of one float dtype, group sizes summing to the rows.
void check_grouped(const char* op, const Tensor& x, const Tensor& weight, const char* weight_name,
                   const std::vector<int64_t>& group_rows) {
  check_float(op, "x", x);
  check_float(op, weight_name, weight);
  TITAN_CHECK(weight.dim() == 3 && x.dim() == 2 && x.size(1) == weight.size(2) && x.dtype() == weight.dtype(),
              op, ": expected x [rows, in] and ", weight_name, " [groups, out, in] of one dtype, got ",
              x.desc(), " and ", weight.desc());
  const int64_t total = std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0});
  TITAN_CHECK(static_cast<int64_t>(group_rows.size()) == weight.size(0) && total == x.size(0), op, ": ",
              group_rows.size(), " group sizes summing to ", total, " for ", weight.size(0),
              " weight matrices and ", x.size(0), " rows; give one size per group, summing to the rows of x");
}

// The sizes of `g` on the host: its own, or its counts read back (eager mode).
std::vector<int64_t> host_sizes(const char* op, const GroupSizes& g) {
  if (!g.counts.defined()) return g.host;
  check_cpu(op, g.counts);
  TITAN_CHECK(g.counts.dim() == 1 && g.counts.dtype() == kI64, op, ": expected group sizes [groups] i64, got ",
              g.counts.desc());
  const Tensor c = g.counts.contiguous();
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}

// Group sizes that are data of the step: titan's grouped GEMM kernels as custom calls, forward
// and backward, in the products' operand dtype (bf16 under autocast) with results in float32.
void require_custom_kernels(const char* op) {
  TITAN_CHECK(graph::current_program().custom_kernels(), op,
              ": the group sizes are data of the captured step (sort_by_expert's dropless layout), which only "
              "titan's grouped GEMM takes, as a custom call, and this program has no custom kernels "
              "(compile.custom_kernels = false, or a plugin that cannot run them); lay the rows out in "
              "expert_slots' capacity layout instead (nn::moe::CapacityTokenDispatcher)");
}

// `t` as a product's operand: converted to `operand` (bf16 under autocast) in the program.
Tensor as_operand(const Tensor& t, DType operand) {
  const Value v = graph::value_of(t, "grouped products");
  return graph::tensor_of(v.dtype == operand ? v : hlo::convert(v, operand));
}

// Group sizes that are data of the step: titan's grouped GEMM kernels as custom calls, forward
// and backward, in the products' operand dtype (bf16 under autocast) with results in float32.
Tensor grouped_linear_called(const Tensor& x, const Tensor& weight, const Tensor& counts) {
  require_custom_kernels("grouped_linear");
  TITAN_CHECK(weight.dim() == 3 && x.dim() == 2 && x.size(1) == weight.size(2) && x.dtype() == weight.dtype() &&
                  counts.dim() == 1 && counts.size(0) == weight.size(0) && counts.dtype() == kI64,
              "grouped_linear: expected x [rows, in], weight [groups, out, in] of one dtype and group sizes "
              "[groups] i64, got ", x.desc(), ", ", weight.desc(), " and ", counts.desc());
  const DType operand = matmul_operand_dtype(x.dtype());
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype();
  const Tensor xo = as_operand(x, operand), wo = as_operand(weight, operand);
  const Tensor y = graph::tensor_of(grouped_gemm_call(graph::value_of(xo, "grouped_linear"),
                                                      graph::value_of(wo, "grouped_linear"),
                                                      graph::value_of(counts, "grouped_linear"), true));
  autograd::record("grouped_linear", {x, weight}, {y},
                   [xo, wo, counts, x_dtype, w_dtype, operand](const autograd::GradContext& g) {
                     const char* bwd = "grouped_linear backward";
                     const Value gy = graph::value_of(as_operand(g[0], operand), bwd);
                     const Value c = graph::value_of(counts, bwd);
                     Tensor dx, dw;
                     if (g.needs(0))
                       dx = graph::tensor_of(
                           hlo::convert(grouped_gemm_call(gy, graph::value_of(wo, bwd), c, false), x_dtype));
                     if (g.needs(1))
                       dw = graph::tensor_of(
                           hlo::convert(grouped_gemm_tn_call(gy, graph::value_of(xo, bwd), c), w_dtype));
                     return std::vector<Tensor>{dx, dw};
                   });
  return y;
}

// grouped_swiglu with group sizes that are data of the step: the kernels of eager's op as custom
// calls, the forward keeping gate and up for the backward, as eager does.
Tensor grouped_swiglu_called(const Tensor& x, const Tensor& w1, const Tensor& w3, const Tensor& counts) {
  require_custom_kernels("grouped_swiglu");
  TITAN_CHECK(w1.dim() == 3 && w1.sizes() == w3.sizes() && x.dim() == 2 && x.size(1) == w1.size(2) &&
                  x.dtype() == w1.dtype() && w3.dtype() == w1.dtype() && counts.dim() == 1 &&
                  counts.size(0) == w1.size(0) && counts.dtype() == kI64,
              "grouped_swiglu: expected x [rows, in], w1 and w3 [groups, hidden, in] of one dtype and group sizes "
              "[groups] i64, got ", x.desc(), ", ", w1.desc(), ", ", w3.desc(), " and ", counts.desc());
  const DType operand = matmul_operand_dtype(x.dtype());
  const std::vector<DType> dtypes{x.dtype(), w1.dtype(), w3.dtype()};
  const Tensor xo = as_operand(x, operand), w1o = as_operand(w1, operand), w3o = as_operand(w3, operand);
  const std::vector<Value> fwd = grouped_swiglu_fwd_call(graph::value_of(xo, "grouped_swiglu"),
                                                         graph::value_of(w1o, "grouped_swiglu"),
                                                         graph::value_of(w3o, "grouped_swiglu"),
                                                         graph::value_of(counts, "grouped_swiglu"));
  const Tensor h = graph::tensor_of(fwd[0]);
  autograd::record("grouped_swiglu", {x, w1, w3}, {h},
                   [xo, w1o, w3o, counts, dtypes, gate = graph::tensor_of(fwd[1]),
                    up = graph::tensor_of(fwd[2])](const autograd::GradContext& g) {
                     const char* bwd = "grouped_swiglu backward";
                     const Value gate_v = graph::value_of(gate, bwd);
                     Value dh = graph::value_of(g[0], bwd);
                     if (dh.dtype != gate_v.dtype) dh = hlo::convert(dh, gate_v.dtype);
                     const std::vector<Value> d = grouped_swiglu_bwd_call(
                         dh, gate_v, graph::value_of(up, bwd), graph::value_of(xo, bwd), graph::value_of(w1o, bwd),
                         graph::value_of(w3o, bwd), graph::value_of(counts, bwd));
                     std::vector<Tensor> grads;
                     for (size_t i = 0; i < 3; ++i)
                       grads.push_back(g.needs(static_cast<int>(i)) ? graph::tensor_of(hlo::convert(d[i], dtypes[i]))
                                                                    : Tensor());
                     return grads;
                   });
  return h;
}

// Groups of one size known on the host as one batched product through matmul, which lowers it
// and applies autocast; sizes that are data as custom calls.
Tensor grouped_linear_lowered(const Tensor& x, const Tensor& weight, const GroupSizes& sizes) {
  if (sizes.counts.defined()) return grouped_linear_called(x, weight, sizes.counts);
  const std::vector<int64_t>& group_rows = sizes.host;
  TITAN_CHECK(weight.dim() == 3 && x.dim() == 2 && x.size(1) == weight.size(2) && x.dtype() == weight.dtype() &&
                  static_cast<int64_t>(group_rows.size()) == weight.size(0),
              "grouped_linear: expected x [rows, in] and weight [groups, out, in] of one dtype with a size per "
              "group, got ", x.desc(), ", ", weight.desc(), " and ", group_rows.size(), " sizes");
  const int64_t groups = weight.size(0), rows = group_rows.front();
  for (int64_t r : group_rows)
    TITAN_CHECK(r == rows && rows * groups == x.size(0), "grouped_linear: in a captured step, group sizes known on "
                "the host must be one size (the capacity of ops::expert_slots), got groups of ", rows, " and ", r,
                " rows for x ", x.desc());
  return matmul(x.reshape({groups, rows, x.size(1)}), weight.transpose(1, 2)).reshape({x.size(0), weight.size(1)});
}
}  // namespace

// Under autocast the groups multiply bf16 copies of x and the weights (kept for backward, which
// rounds the output gradient to bf16 too), accumulating in float32; outputs and gradients are
// float32, and SwiGLU's gate and up stay float32 (core/autocast.h).
Tensor grouped_linear(const Tensor& x, const Tensor& weight, const GroupSizes& sizes) {
  const OpSpan span("grouped_linear", x, weight);
  if (graph::any_lazy({&x, &weight, &sizes.counts})) return grouped_linear_lowered(x, weight, sizes);
  const std::vector<int64_t> group_rows = host_sizes("grouped_linear", sizes);
  check_grouped("grouped_linear", x, weight, "weight", group_rows);
  const int64_t groups = weight.size(0), out_f = weight.size(1), in_f = weight.size(2);
  const DType operand = matmul_operand_dtype(x.dtype());
  Tensor xc = dense(x).to(operand), wc = dense(weight).to(operand);
  Tensor y = Tensor::empty({x.size(0), out_f}, x.options());
  kernels::cpu::dispatch_matmul(operand, [&](auto z) {
    using T = decltype(z);
    kernels::cpu::grouped_gemm<T>(group_rows.data(), groups, out_f, in_f, xc.data<T>(), wc.data<T>(), true,
                                  y.data<gemm_acc_t<T>>());
  });
  autograd::record("grouped_linear", {x, weight}, {y}, [xc, wc, group_rows](const autograd::GradContext& g) {
    const int64_t groups = wc.size(0), out_f = wc.size(1), in_f = wc.size(2);
    Tensor gy = g[0].contiguous().to(wc.dtype());
    Tensor dx, dw;
    kernels::cpu::dispatch_matmul(gy.dtype(), [&](auto z) {
      using T = decltype(z);
      using Acc = gemm_acc_t<T>;
      const TensorOptions result{.dtype = dtype_of<Acc>::value};
      if (g.needs(0)) {
        dx = Tensor::empty(xc.sizes(), result);
        kernels::cpu::grouped_gemm<T>(group_rows.data(), groups, in_f, out_f, gy.data<T>(), wc.data<T>(),
                                      false, dx.data<Acc>());
      }
      if (g.needs(1)) {
        dw = Tensor::empty(wc.sizes(), result);
        kernels::cpu::grouped_gemm_tn<T>(group_rows.data(), groups, out_f, in_f, gy.data<T>(), xc.data<T>(),
                                         dw.data<Acc>());
      }
    });
    return std::vector<Tensor>{dx, dw};
  });
  return y;
}

Tensor grouped_swiglu(const Tensor& x, const Tensor& w1, const Tensor& w3, const GroupSizes& sizes) {
  const OpSpan span("grouped_swiglu", x, w1, w3);
  if (graph::any_lazy({&x, &w1, &w3, &sizes.counts})) {
    if (sizes.counts.defined()) return grouped_swiglu_called(x, w1, w3, sizes.counts);
    return swiglu(grouped_linear_lowered(x, w1, sizes), grouped_linear_lowered(x, w3, sizes));
  }
  const std::vector<int64_t> group_rows = host_sizes("grouped_swiglu", sizes);
  check_grouped("grouped_swiglu", x, w1, "w1", group_rows);
  check_grouped("grouped_swiglu", x, w3, "w3", group_rows);
  TITAN_CHECK(w1.sizes() == w3.sizes(), "grouped_swiglu: w1 ", w1.desc(), " and w3 ", w3.desc(),
              " must have the same shape [groups, hidden, in]");
  const int64_t groups = w1.size(0), hidden = w1.size(1), in_f = w1.size(2);
  const DType operand = matmul_operand_dtype(x.dtype());
  Tensor xc = dense(x).to(operand), w1c = dense(w1).to(operand), w3c = dense(w3).to(operand);
  Tensor gate, up, h;
  kernels::cpu::dispatch_matmul(operand, [&](auto z) {
    using T = decltype(z);
    using Acc = gemm_acc_t<T>;
    const TensorOptions acc{.dtype = dtype_of<Acc>::value};
    gate = Tensor::empty({x.size(0), hidden}, acc);
    up = Tensor::empty({x.size(0), hidden}, acc);
    h = Tensor::empty({x.size(0), hidden}, acc);
    kernels::cpu::grouped_swiglu_fwd<T>(group_rows.data(), groups, hidden, in_f, xc.data<T>(), w1c.data<T>(),
                                        w3c.data<T>(), gate.data<Acc>(), up.data<Acc>(), h.data<Acc>());
  });
  autograd::record("grouped_swiglu", {x, w1, w3}, {h},
                   [xc, w1c, w3c, gate, up, group_rows](const autograd::GradContext& g) {
                     const int64_t groups = w1c.size(0), hidden = w1c.size(1), in_f = w1c.size(2);
                     Tensor dx, dw1, dw3;
                     kernels::cpu::dispatch_matmul(w1c.dtype(), [&](auto z) {
                       using T = decltype(z);
                       using Acc = gemm_acc_t<T>;
                       const TensorOptions result{.dtype = dtype_of<Acc>::value};
                       const Tensor dh = g[0].contiguous().to(result.dtype);
                       if (g.needs(0)) dx = Tensor::empty(xc.sizes(), result);
                       if (g.needs(1)) dw1 = Tensor::empty(w1c.sizes(), result);
                       if (g.needs(2)) dw3 = Tensor::empty(w3c.sizes(), result);
                       auto out = [](Tensor& t) { return t.defined() ? t.data<Acc>() : nullptr; };
                       kernels::cpu::grouped_swiglu_bwd<T>(group_rows.data(), groups, hidden, in_f, dh.data<Acc>(),
                                                           gate.data<Acc>(), up.data<Acc>(), xc.data<T>(),
                                                           w1c.data<T>(), w3c.data<T>(), out(dx), out(dw1), out(dw3));
                     });
                     return std::vector<Tensor>{dx, dw1, dw3};
                   });
  return h;
}

}  // namespace titan::ops
