#include "titan/attention/splash_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "titan/attention/scores.h"
#include "titan/kernels/cpu/bf16_convert.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/tile_gemm.h"
#include "titan/kernels/cpu/vec_math.h"

namespace titan::attention {

namespace {

using kernels::cpu::BandOf;
using kernels::cpu::kTileRows;
using kernels::cpu::row_max;
using kernels::cpu::Strided;
using kernels::cpu::TileBand;
using kernels::cpu::vexp;

// The tiles' products by operand type U: T's own tile_gemm, or (U = bf16, T = float) bf16
// operands with float32 sums, under bf16 autocast. Everything else (softmax statistics, the
// outputs and gradients) stays T.
template <typename U>
int64_t packed_size(int64_t k, int64_t n) {
  if constexpr (std::is_same_v<U, bf16>)
    return kernels::cpu::tile_packed_size_bf16(k, n);
  else
    return kernels::cpu::tile_packed_size<U>(k, n);
}
template <typename T>
void pack(int64_t k, int64_t n, Strided<T> b, T* packed) {
  kernels::cpu::pack_tile_b<T>(k, n, b, packed);
}
void pack(int64_t k, int64_t n, Strided<float> b, bf16* packed) {
  kernels::cpu::pack_tile_b_bf16(k, n, b, packed);
}
template <typename T>
void product(int64_t m, int64_t n, int64_t k, T alpha, Strided<T> a, const T* b, bool accumulate, T* c,
             int64_t ldc, std::span<const TileBand> bands, BandOf band_of) {
  kernels::cpu::tile_gemm<T>(m, n, k, alpha, a, b, accumulate, c, ldc, bands, band_of);
}
void product(int64_t m, int64_t n, int64_t k, float alpha, Strided<bf16> a, const bf16* b, bool accumulate,
             float* c, int64_t ldc, std::span<const TileBand> bands, BandOf band_of) {
  kernels::cpu::tile_gemm_bf16(m, n, k, alpha, a, b, accumulate, c, ldc, bands, band_of);
}

// x[0, n) as the products' operand: x itself, or its bf16 copy written to `copy`.
template <typename U, typename T>
const U* as_operand(const T* x, int64_t n, U* copy) {
  if constexpr (std::is_same_v<U, T>)
    return x;
  else {
    kernels::cpu::floats_to_bf16(x, copy, n);
    return copy;
  }
}

// Where rows live. In a [B, S, H, D] tensor one head's rows form an [S, D] matrix with row stride
// H * D, which BLAS reads and writes in place. Per-row statistics (logsumexp, rowsum(dO * O)) are
// [B, Hq, S].
struct Geometry {
  int64_t B, S, Hq, Hkv, D;

  int64_t group() const { return Hq / Hkv; }
  int64_t ldq() const { return Hq * D; }
  int64_t ldk() const { return Hkv * D; }
  int64_t q_at(int64_t b, int64_t row, int64_t h) const { return ((b * S + row) * Hq + h) * D; }
  int64_t kv_at(int64_t b, int64_t row, int64_t hk) const { return ((b * S + row) * Hkv + hk) * D; }
  int64_t stat_at(int64_t b, int64_t h, int64_t row) const { return (b * Hq + h) * S + row; }
};

// Rows [start, start + len) of a block of `size` rows.
struct Span {
  int64_t start, len;
};
Span block(int64_t index, int64_t size, int64_t total) {
  const int64_t start = index * size;
  return {start, std::min(size, total - start)};
}

// One [S, D] matrix per (batch row, head) of q, k, v or dout, packed block by block as
// tile_gemm's B operand in the operand type U, once per call: a key block is read by every query
// block and query head that sees it, a query block by every key block it sees. `Rows` packs a
// block's tokens as the summed dimension (for P V, P^T dO, dS^T Q, dS K), `Columns` its head dimension (for Q
// K^T and dO V^T, the block's tokens being the product's columns).
enum class Packing { Rows, Columns };

template <typename U>
struct PackedBlocks {
  int64_t heads = 0, blocks = 0, stride = 0;
  Tensor storage;  // a Tensor, so that the allocator's peak counts it

  const U* at(int64_t b, int64_t head, int64_t blk) const {
    return storage.data<U>() + ((b * heads + head) * blocks + blk) * stride;
  }
};

template <typename U>
PackedBlocks<U> packed_blocks(const Geometry& g, int64_t heads, int64_t block_rows, Packing packing) {
  const int64_t blocks = (g.S + block_rows - 1) / block_rows;
  const int64_t stride =
      packing == Packing::Rows ? packed_size<U>(block_rows, g.D) : packed_size<U>(g.D, block_rows);
  return {heads, blocks, stride,
          Tensor::empty({g.B * heads * blocks * stride}, {.dtype = dtype_of<U>::value})};
}

// Packs block `i` (of B x heads x blocks) of x, whose rows sit heads * D apart; call it for every
// i from inside a team's worksharing loop.
template <typename T, typename U>
void pack_block(const Geometry& g, const T* x, int64_t block_rows, Packing packing, PackedBlocks<U>& out,
                int64_t i) {
  const int64_t blk = i % out.blocks, head = i / out.blocks % out.heads, b = i / out.blocks / out.heads;
  const Span rows = block(blk, block_rows, g.S);
  const int64_t ld = out.heads * g.D;
  const T* src = x + ((b * g.S + rows.start) * out.heads + head) * g.D;
  U* dst = const_cast<U*>(out.at(b, head, blk));
  if (packing == Packing::Rows)
    pack(rows.len, g.D, Strided<T>{src, ld, 1}, dst);
  else
    pack(g.D, rows.len, Strided<T>{src, 1, ld}, dst);
}

// The A operands read in place: q (and dout) itself, or a bf16 copy of it made once per call.
template <typename T, typename U>
struct InPlace {
  Tensor copy;
  const U* data = nullptr;

  InPlace(const T* x, int64_t numel) {
    if constexpr (std::is_same_v<U, T>)
      data = x;
    else {
      copy = Tensor::empty({numel}, {.dtype = kBF16});
      data = copy.data<U>();
    }
  }
  // Converts rows [i * len, (i + 1) * len) of the copy; call it for every i from inside a team's
  // worksharing loop.
  void convert(const T* x, int64_t len, int64_t i) {
    if constexpr (!std::is_same_v<U, T>) as_operand(x + i * len, len, const_cast<U*>(data) + i * len);
  }
};

// Where a partial tile's visible pairs lie, so that its products and exps skip what the mask
// hides (a causal diagonal tile hides nearly half of itself): the mask, each query row's span of
// keys [begin, end) that holds every key it sees (begin = end when it sees none), and per
// register block of tile_gemm's rows the keys its queries see (`by_query`: the columns of Q K^T
// and dO V^T, the terms of P V and dS K) and the queries that see its keys (`by_key`: the terms
// of P^T dO and dS^T Q).
struct TileShape {
  std::vector<uint8_t> visible;
  std::vector<int64_t> begin, end;
  std::vector<TileBand> by_query, by_key;

  TileShape(int64_t bq, int64_t bk)
      : visible(static_cast<size_t>(bq * bk)),
        begin(bq),
        end(bq),
        by_query(static_cast<size_t>(kernels::cpu::tile_row_blocks(bq))),
        by_key(static_cast<size_t>(kernels::cpu::tile_row_blocks(bk))) {}

  void build(const Mask& mask, int64_t b, Span qs, Span ks) {
    mask.fill(b, qs.start, qs.start + qs.len, ks.start, ks.start + ks.len, visible.data());
    // Empty bands as begin > end, so that min and max widen them.
    std::fill_n(by_query.begin(), kernels::cpu::tile_row_blocks(qs.len), TileBand{ks.len, 0});
    std::fill_n(by_key.begin(), kernels::cpu::tile_row_blocks(ks.len), TileBand{qs.len, 0});
    for (int64_t r = 0; r < qs.len; ++r) {
      const uint8_t* row = visible.data() + r * ks.len;
      int64_t f = 0, e = ks.len;
      while (f < e && !row[f]) ++f;
      while (e > f && !row[e - 1]) --e;
      begin[r] = f;
      end[r] = e;
      if (f == e) continue;
      TileBand& q = by_query[r / kTileRows];
      q = {std::min(q.begin, f), std::max(q.end, e)};
      for (int64_t kb = f / kTileRows; kb <= (e - 1) / kTileRows; ++kb)
        by_key[kb] = {std::min(by_key[kb].begin, r), std::max(by_key[kb].end, r + 1)};
    }
  }
};

// The bands of a tile: none (the whole product) for a full tile, whose shape is null.
std::span<const TileBand> query_bands(const TileShape* shape) {
  return shape ? std::span<const TileBand>(shape->by_query) : std::span<const TileBand>();
}
std::span<const TileBand> key_bands(const TileShape* shape) {
  return shape ? std::span<const TileBand>(shape->by_key) : std::span<const TileBand>();
}

// The span of keys [j0, j1) of tile row r that may hold visible pairs.
std::pair<int64_t, int64_t> row_span(const TileShape* shape, int64_t r, int64_t keys) {
  return shape ? std::pair{shape->begin[r], shape->end[r]} : std::pair{int64_t{0}, keys};
}

// Per-thread buffers: two tiles of scores (probabilities and their gradients), their copies in
// the operand type U where it is not T, per-row running max and sum, and the shape of a partial
// tile.
template <typename T, typename U>
struct Scratch {
  std::vector<T> p, dp, max, sum;
  std::vector<U> p_op, dp_op;
  TileShape shape;
  Scratch(int64_t bq, int64_t bk)
      : p(bq * bk),
        dp(bq * bk),
        max(bq),
        sum(bq),
        p_op(std::is_same_v<T, U> ? 0 : bq * bk),
        dp_op(std::is_same_v<T, U> ? 0 : bq * bk),
        shape(bq, bk) {}
};

// Whether `tasks` tasks get a team of threads: inside one already (nested), they run on the
// calling thread. Either way each tile's GEMM is single-threaded, as OpenBLAS's OpenMP build is
// inside a parallel region.
bool team_for(int64_t tasks) {
  return tasks > 1 && !omp_in_parallel() && omp_get_max_threads() > 1;
}

// Tasks 0..rows*heads-1, task = (row * heads + head), sorted by the tiles of their row, most
// first (stable, so equal rows keep their order).
template <typename F>
std::vector<int64_t> heavy_first(int64_t rows, int64_t heads, const F& tiles) {
  std::vector<int64_t> work(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) work[r] = tiles(r);
  std::vector<int64_t> order(static_cast<size_t>(rows * heads));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return work[a / heads] > work[b / heads]; });
  return order;
}

// The scores' rule (scores.h) in the kernel's type: cap 0 for none.
template <typename T>
struct ScoreRule {
  T scale, cap;
};

// s[m, n] = scale * Q K^T for one tile (K^T packed by columns), capped where the rule has a cap.
// Of a partial tile, at least each row's span is written, with the pairs the mask hides there at
// -inf.
template <typename T, typename U>
void scores(const Geometry& g, Span qs, Span ks, ScoreRule<T> rule, const U* Q, const U* kt, T* s,
            const TileShape* shape) {
  product(qs.len, ks.len, g.D, rule.scale, Strided<U>{Q, g.ldq(), 1}, kt, false, s, ks.len,
          query_bands(shape), BandOf::columns);
  if (!shape) {
    if (rule.cap != T(0)) cap_scores(s, qs.len * ks.len, rule.cap);
    return;
  }
  for (int64_t r = 0; r < qs.len; ++r) {
    T* row = s + r * ks.len;
    const uint8_t* seen = shape->visible.data() + r * ks.len;
    if (rule.cap != T(0)) cap_scores(row + shape->begin[r], shape->end[r] - shape->begin[r], rule.cap);
    for (int64_t j = shape->begin[r]; j < shape->end[r]; ++j)
      row[j] = seen[j] ? row[j] : -std::numeric_limits<T>::infinity();
  }
}

// out = softmax(scores(q k^T) + mask) v, and each row's logsumexp for backward. Every mask rule
// shows each query its own key, but a mask over part of the keys (ring attention's) may show a row
// none: its sum stays 0, and it gets out 0 and lse -inf. Under bf16 (U) the products
// read bf16 copies of q, k, v and of each tile's probabilities (as FlashAttention multiplies
// them); the running max and sum, the rescaling and out stay T.
template <typename T, typename U>
void forward(const Geometry& g, const BlockMask& bm, ScoreRule<T> rule, const T* q, const T* k, const T* v,
             T* out, T* lse) {
  const int64_t bq = bm.block_q(), bk = bm.block_kv(), nq = bm.num_q_blocks(), ld = g.ldq();
  PackedBlocks<U> kt = packed_blocks<U>(g, g.Hkv, bk, Packing::Columns);
  PackedBlocks<U> vr = packed_blocks<U>(g, g.Hkv, bk, Packing::Rows);
  InPlace<T, U> qa(q, g.B * g.S * ld);
  const auto order = heavy_first(g.B * nq, g.Hq, [&](int64_t r) {
    return static_cast<int64_t>(bm.full_kv(r / nq, r % nq).size() + bm.partial_kv(r / nq, r % nq).size());
  });
  auto task = [&](int64_t t, Scratch<T, U>& w) {
    const int64_t h = t % g.Hq, b = t / g.Hq / nq, qb = t / g.Hq % nq, hk = h / g.group();
    const Span qs = block(qb, bq, g.S);
    const U* Q = qa.data + g.q_at(b, qs.start, h);
    T* O = out + g.q_at(b, qs.start, h);
    for (int64_t r = 0; r < qs.len; ++r) std::fill(O + r * ld, O + r * ld + g.D, T(0));
    std::fill(w.max.begin(), w.max.end(), -std::numeric_limits<T>::infinity());
    std::fill(w.sum.begin(), w.sum.end(), T(0));

    auto tile = [&](int32_t kb, bool partial) {
      const Span ks = block(kb, bk, g.S);
      T* s = w.p.data();
      const TileShape* shape = partial ? &w.shape : nullptr;
      if (partial) w.shape.build(bm.mask(), b, qs, ks);
      scores(g, qs, ks, rule, Q, kt.at(b, hk, kb), s, shape);
      // Online softmax: rescale what the row has gathered so far to the new running max.
      for (int64_t r = 0; r < qs.len; ++r) {
        T* row = s + r * ks.len;
        const auto [j0, j1] = row_span(shape, r, ks.len);
        std::fill(row, row + j0, T(0));
        std::fill(row + j1, row + ks.len, T(0));
        const T top = std::max(w.max[r], row_max(row + j0, j1 - j0));
        if (top == -std::numeric_limits<T>::infinity()) {  // no key of this row seen yet
          std::fill(row + j0, row + j1, T(0));
          continue;
        }
        const T alpha = vexp(w.max[r] - top);
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = j0; j < j1; ++j) {
          const T e = vexp(row[j] - top);
          row[j] = e;
          sum += e;
        }
        w.sum[r] = w.sum[r] * alpha + sum;
        w.max[r] = top;
        if (alpha != T(1))
          for (T* o = O + r * ld; o < O + r * ld + g.D; ++o) *o *= alpha;
      }
      const U* P = as_operand(s, qs.len * ks.len, w.p_op.data());
      product(qs.len, g.D, ks.len, T(1), Strided<U>{P, ks.len, 1}, vr.at(b, hk, kb), true, O, ld,
              query_bands(shape), BandOf::terms);
    };
    for (int32_t kb : bm.full_kv(b, qb)) tile(kb, false);
    for (int32_t kb : bm.partial_kv(b, qb)) tile(kb, true);

    T* L = lse + g.stat_at(b, h, qs.start);
    for (int64_t r = 0; r < qs.len; ++r) {
      if (w.sum[r] == T(0)) {  // saw no key: O is still 0
        L[r] = -std::numeric_limits<T>::infinity();
        continue;
      }
      const T inv = T(1) / w.sum[r];
      for (T* o = O + r * ld; o < O + r * ld + g.D; ++o) *o *= inv;
      L[r] = w.max[r] + std::log(w.sum[r]);
    }
  };
  // Dynamic scheduling, with heavy tasks first, keeps threads busy when tasks differ in size (a
  // causal mask gives the last query blocks the most key blocks). Each task owns its output
  // rows, so nothing depends on which thread runs it.
  const auto n = static_cast<int64_t>(order.size());
  const int64_t kv_blocks = g.B * g.Hkv * kt.blocks;
#pragma omp parallel if (team_for(n))
  {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < g.B * g.S; ++i) qa.convert(q, ld, i);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < kv_blocks; ++i) {
      pack_block(g, k, bk, Packing::Columns, kt, i);
      pack_block(g, v, bk, Packing::Rows, vr, i);
    }
    Scratch<T, U> w(bq, bk);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) task(order[i], w);
  }
}

// The inputs of backward that each tile reads: q and dout as operands, K^T and V^T packed by
// columns.
template <typename T, typename U>
struct Saved {
  const U *q, *dout;
  const T *lse, *delta;
  const PackedBlocks<U>&kt, &vt;
};

// For one tile (`shape` built for it when it is partial, else null): P = exp(s - lse) in w.p, and
// dS = P * (dO V^T - rowsum(dO * O)) in w.dp, times the cap's derivative where the rule has a cap
// (the gradient of the scaled scores before the cap); of a partial tile both are zero outside
// each row's span.
template <typename T, typename U>
void tile_grads(const Geometry& g, const BlockMask& bm, const Saved<T, U>& in, ScoreRule<T> rule, int64_t b,
                int64_t h, Span qs, Span ks, const TileShape* shape, Scratch<T, U>& w) {
  const int64_t hk = h / g.group(), kb = ks.start / bm.block_kv();
  T* p = w.p.data();
  T* dp = w.dp.data();
  scores(g, qs, ks, rule, in.q + g.q_at(b, qs.start, h), in.kt.at(b, hk, kb), p, shape);
  product(qs.len, ks.len, g.D, T(1), Strided<U>{in.dout + g.q_at(b, qs.start, h), g.ldq(), 1},
          in.vt.at(b, hk, kb), false, dp, ks.len, query_bands(shape), BandOf::columns);
  const T* L = in.lse + g.stat_at(b, h, qs.start);
  const T* Dl = in.delta + g.stat_at(b, h, qs.start);
  for (int64_t r = 0; r < qs.len; ++r) {
    T* pr = p + r * ks.len;
    T* dr = dp + r * ks.len;
    const auto [j0, j1] = row_span(shape, r, ks.len);
    for (T* x : {pr, dr}) {
      std::fill(x, x + j0, T(0));
      std::fill(x + j1, x + ks.len, T(0));
    }
    const T l = L[r], d = Dl[r];
    if (rule.cap == T(0)) {
      for (int64_t j = j0; j < j1; ++j) {
        pr[j] = vexp(pr[j] - l);
        dr[j] = pr[j] * (dr[j] - d);
      }
      continue;
    }
    const T inv_cap = T(1) / rule.cap;
    for (int64_t j = j0; j < j1; ++j) {
      const T slope = cap_grad_factor(pr[j], inv_cap);
      pr[j] = vexp(pr[j] - l);
      dr[j] = pr[j] * (dr[j] - d) * slope;
    }
  }
}

// Backward aims at this many tasks (see backward), so that every thread has work and equal
// tasks balance, cutting each (batch row, kv head) into at most kMaxRuns runs, each past the
// first costing a dq-sized buffer. Functions of the shape alone, so that results do not depend
// on the thread count.
constexpr int64_t kMinBackwardTasks = 16;
constexpr int64_t kMaxRuns = 4;

// The key blocks of batch row b cut into `parts` consecutive runs of about equal work (tiles
// that see them): run s is [cuts[s], cuts[s + 1]).
std::vector<int64_t> split_key_blocks(const BlockMask& bm, int64_t b, int64_t parts) {
  const int64_t nk = bm.num_kv_blocks();
  std::vector<int64_t> work(static_cast<size_t>(nk + 1), 0);
  for (int64_t kb = 0; kb < nk; ++kb)
    work[kb + 1] = work[kb] + static_cast<int64_t>(bm.full_q(b, kb).size() + bm.partial_q(b, kb).size());
  std::vector<int64_t> cuts{0};
  for (int64_t s = 1; s < parts; ++s) {
    const int64_t target = work[nk] * s / parts;
    cuts.push_back(std::max(cuts.back(), std::lower_bound(work.begin(), work.end(), target) - work.begin()));
  }
  cuts.push_back(nk);
  return cuts;
}

// dq, dk, dv (each optional; written whole, or added into with `accumulate`) from dout, in one
// pass over key blocks. D = rowsum(dO * O) first (from `out` when given, else `delta` holds it);
// then each task takes a run of key blocks of one (batch row, kv head),
// walks the transposed lists (the query blocks that see each key block) for every query head of
// the group, and gathers dK and dV of its key blocks and dQ of the query rows they reach. The
// task owns its dK and dV rows outright. dQ rows are reached from every run, so run 0 gathers
// into dq and run r > 0 into a buffer of its own, each task owning its group's rows there;
// the buffers are added into dq in run order at the end. No atomics, and no second pass
// recomputing the scores. All in one team of threads, as every start and join of a team costs
// the slowest thread's delay. Under bf16 (U) the products read bf16 copies of q, k, v, dout and
// of each tile's P and dS; D, P and dS are computed in T, and the gradients gathered in T.
template <typename T, typename U>
void backward(const Geometry& g, const BlockMask& bm, ScoreRule<T> rule, const T* q, const T* k, const T* v,
              const T* out, const T* lse, T* delta, const T* dout, T* dq, T* dk, T* dv, bool accumulate) {
  const int64_t bq = bm.block_q(), bk = bm.block_kv(), heads = g.B * g.Hkv;
  const int64_t runs =
      std::clamp<int64_t>((kMinBackwardTasks + heads - 1) / heads, 1, std::min(kMaxRuns, bm.num_kv_blocks()));
  std::vector<std::vector<int64_t>> cuts;
  for (int64_t b = 0; b < bm.batch(); ++b) cuts.push_back(split_key_blocks(bm, b, runs));
  // A tensor rather than a vector, so that the allocator's peak counts it.
  const TensorOptions opts{.dtype = dtype_of<T>::value};
  const int64_t q_numel = g.B * g.S * g.Hq * g.D;
  Tensor dq_runs_t = dq && runs > 1 ? Tensor::empty({runs - 1, q_numel}, opts) : Tensor();
  T* dq_runs = dq_runs_t.defined() ? dq_runs_t.data<T>() : nullptr;
  // Packed by rows for the products that sum over a block's tokens: dO and Q over query rows (dV,
  // dK), K over keys (dQ); only those of the gradients asked for.
  PackedBlocks<U> kt = packed_blocks<U>(g, g.Hkv, bk, Packing::Columns);
  PackedBlocks<U> vt = packed_blocks<U>(g, g.Hkv, bk, Packing::Columns);
  PackedBlocks<U> dor = dv ? packed_blocks<U>(g, g.Hq, bq, Packing::Rows) : PackedBlocks<U>{};
  PackedBlocks<U> qr = dk ? packed_blocks<U>(g, g.Hq, bq, Packing::Rows) : PackedBlocks<U>{};
  PackedBlocks<U> kr = dq ? packed_blocks<U>(g, g.Hkv, bk, Packing::Rows) : PackedBlocks<U>{};
  InPlace<T, U> qa(q, q_numel), da(dout, q_numel);
  const Saved<T, U> in{qa.data, da.data, lse, delta, kt, vt};

  auto task = [&](int64_t t, Scratch<T, U>& w) {
    const int64_t run = t % runs, hk = t / runs % g.Hkv, b = t / runs / g.Hkv;
    const std::vector<int64_t>& cut = cuts[bm.batch() == 1 ? 0 : b];
    const int64_t k0 = cut[run] * bk, k1 = std::min(g.S, cut[run + 1] * bk), span = g.group() * g.D;
    T* dQ = run == 0 ? dq : dq_runs ? dq_runs + (run - 1) * q_numel : nullptr;
    // Run 0 gathers straight into dq; the other runs' buffers always start from 0.
    for (T* d : {dk, dv})
      if (d && !accumulate)
        for (int64_t row = k0; row < k1; ++row) std::fill_n(d + g.kv_at(b, row, hk), g.D, T(0));
    if (dQ && (run > 0 || !accumulate))
      for (int64_t row = 0; row < g.S; ++row) std::fill_n(dQ + g.q_at(b, row, hk * g.group()), span, T(0));

    for (int64_t kb = cut[run]; kb < cut[run + 1]; ++kb) {
      const Span ks = block(kb, bk, g.S);
      T* dK = dk ? dk + g.kv_at(b, ks.start, hk) : nullptr;
      T* dV = dv ? dv + g.kv_at(b, ks.start, hk) : nullptr;
      for (int64_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h) {
        auto tile = [&](int32_t qb, bool partial) {
          const Span qs = block(qb, bq, g.S);
          const TileShape* shape = partial ? &w.shape : nullptr;
          if (partial) w.shape.build(bm.mask(), b, qs, ks);
          tile_grads(g, bm, in, rule, b, h, qs, ks, shape, w);
          const int64_t n = qs.len * ks.len;
          const U* P = dV ? as_operand(w.p.data(), n, w.p_op.data()) : nullptr;
          const U* dS = dK || dQ ? as_operand(w.dp.data(), n, w.dp_op.data()) : nullptr;
          // Of a partial tile, each block of keys sums over the queries that see it, each block of
          // queries over the keys it sees.
          const std::span<const TileBand> by_key = key_bands(shape), by_query = query_bands(shape);
          if (dV)
            product(ks.len, g.D, qs.len, T(1), Strided<U>{P, 1, ks.len}, dor.at(b, h, qb), true, dV, g.ldk(),
                    by_key, BandOf::terms);
          if (dK)
            product(ks.len, g.D, qs.len, rule.scale, Strided<U>{dS, 1, ks.len}, qr.at(b, h, qb), true, dK,
                    g.ldk(), by_key, BandOf::terms);
          if (dQ)
            product(qs.len, g.D, ks.len, rule.scale, Strided<U>{dS, ks.len, 1}, kr.at(b, hk, kb), true,
                    dQ + g.q_at(b, qs.start, h), g.ldq(), by_query, BandOf::terms);
        };
        for (int32_t qb : bm.full_q(b, kb)) tile(qb, false);
        for (int32_t qb : bm.partial_q(b, kb)) tile(qb, true);
      }
    }
  };

  const int64_t tasks = heads * runs;
  const int64_t kv_blocks = g.B * g.Hkv * kt.blocks, q_blocks = g.B * g.Hq * bm.num_q_blocks();
#pragma omp parallel if (team_for(tasks))
  {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < kv_blocks; ++i) {
      pack_block(g, k, bk, Packing::Columns, kt, i);
      pack_block(g, v, bk, Packing::Columns, vt, i);
      if (dq) pack_block(g, k, bk, Packing::Rows, kr, i);
    }
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < q_blocks; ++i) {
      if (dv) pack_block(g, dout, bq, Packing::Rows, dor, i);
      if (dk) pack_block(g, q, bq, Packing::Rows, qr, i);
    }
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < g.B * g.S; ++i) {
      qa.convert(q, g.ldq(), i);
      da.convert(dout, g.ldq(), i);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < (out ? g.B * g.S : 0); ++i)
      for (int64_t h = 0; h < g.Hq; ++h) {
        const T* o = out + g.q_at(i / g.S, i % g.S, h);
        const T* d = dout + g.q_at(i / g.S, i % g.S, h);
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < g.D; ++j) dot += o[j] * d[j];
        delta[g.stat_at(i / g.S, h, i % g.S)] = dot;
      }

    Scratch<T, U> w(bq, bk);
    // The runs of a (batch row, kv head) are of equal work, so tasks are alike.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) task(t, w);

    if (dq_runs) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < q_numel; ++i)
        for (int64_t r = 0; r < runs - 1; ++r) dq[i] += dq_runs[r * q_numel + i];
    }
  }
}

// (out, lse) and a partial (part, part_lse) over other keys, folded into (out, lse); see
// merge_partial_attention.
template <typename T>
void merge(int64_t rows, int64_t heads, int64_t S, int64_t D, T* out, T* lse, const T* part,
           const T* part_lse) {
  constexpr T none = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(static) if (team_for(rows))
  for (int64_t i = 0; i < rows; ++i) {  // i = b * S + s, one token of every head
    const int64_t b = i / S, s = i % S;
    for (int64_t h = 0; h < heads; ++h) {
      T* o = out + (i * heads + h) * D;
      const T* p = part + (i * heads + h) * D;
      T& l = lse[(b * heads + h) * S + s];
      const T lp = part_lse[(b * heads + h) * S + s];
      if (lp == none) continue;
      if (l == none) {
        std::copy(p, p + D, o);
        l = lp;
        continue;
      }
      const T top = std::max(l, lp);
      const T merged = top + std::log(std::exp(l - top) + std::exp(lp - top));
      const T a = std::exp(l - merged), c = std::exp(lp - merged);
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) o[j] = o[j] * a + p[j] * c;
      l = merged;
    }
  }
}

Geometry geometry(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)};
}

template <typename T>
ScoreRule<T> rule_of(const Scores& s) {
  return {T(s.scale), T(s.softcap.value_or(0.0))};
}

}  // namespace

void splash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                    const Scores& scores, bool bf16_products, const Tensor& out, const Tensor& lse) {
  const Geometry g = geometry(q, k);
  kernels::cpu::dispatch_float(q.dtype(), [&](auto z) {
    using T = decltype(z);
    auto run = [&](auto u) {
      forward<T, decltype(u)>(g, mask, rule_of<T>(scores), q.data<T>(), k.data<T>(), v.data<T>(),
                              out.data<T>(), lse.data<T>());
    };
    if constexpr (std::is_same_v<T, float>)
      if (bf16_products) return run(bf16());
    run(T());
  });
}

void splash_backward(const Tensor& q, const Tensor& k, const Tensor& v, const BlockMask& mask,
                     const Scores& scores, bool bf16_products, const Tensor& out, const Tensor& lse,
                     const Tensor& delta, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                     const Tensor& dv, bool accumulate) {
  const Geometry g = geometry(q, k);
  kernels::cpu::dispatch_float(q.dtype(), [&](auto z) {
    using T = decltype(z);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    auto run = [&](auto u) {
      backward<T, decltype(u)>(g, mask, rule_of<T>(scores), q.data<T>(), k.data<T>(), v.data<T>(), ptr(out),
                               lse.data<T>(), delta.data<T>(), dout.data<T>(), ptr(dq), ptr(dk), ptr(dv),
                               accumulate);
    };
    if constexpr (std::is_same_v<T, float>)
      if (bf16_products) return run(bf16());
    run(T());
  });
}

void merge_partial_attention(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                             const Tensor& lse_part) {
  kernels::cpu::dispatch_float(out.dtype(), [&](auto z) {
    using T = decltype(z);
    merge<T>(out.size(0) * out.size(1), out.size(2), out.size(1), out.size(3), out.data<T>(), lse.data<T>(),
             out_part.data<T>(), lse_part.data<T>());
  });
}

}  // namespace titan::attention
