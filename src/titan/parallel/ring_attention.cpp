// Ring attention: context parallelism's attention over the ranks of a cp group (see
// context_parallel.h).
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "titan/attention/mask.h"
#include "titan/attention/qkv_check.h"
#include "titan/attention/splash_kernel.h"
#include "titan/autograd/node.h"
#include "titan/core/autocast.h"
#include "titan/kernels/cpu/elementwise.h"
#include "titan/ops/checks.h"
#include "titan/ops/op_span.h"
#include "titan/parallel/context_parallel.h"

#include "titan/attention/scores.h"

namespace titan::parallel {

namespace {

using attention::BlockMask;
using attention::Mask;
using Clock = std::chrono::steady_clock;

RingAttentionStats g_stats;

// Adds the seconds since `start` to `total` when it goes out of scope.
class Timer {
 public:
  explicit Timer(double& total) : total_(total), start_(Clock::now()) {}
  ~Timer() { total_ += std::chrono::duration<double>(Clock::now() - start_).count(); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  double& total_;
  Clock::time_point start_;
};

// Message tags, one per kind of block on the ring, so that a K block never matches a receive of
// a V block or of a gradient. Messages of one kind between two ranks arrive in the order sent
// (MPI does not overtake), so the same tag serves every step.
enum Tag : int { kKeys = 0x7c00, kValues, kKeyGrads, kValueGrads };

// Sends to the next rank of the ring and receives from the previous one; wait() completes all of
// them. A ring of one rank has nothing to move and never calls these.
class Transfers {
 public:
  explicit Transfers(dist::ProcessGroup& group)
      : group_(group),
        next_((group.rank() + 1) % group.size()),
        prev_((group.rank() + group.size() - 1) % group.size()) {}
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;
  // Waits on whatever is left, so that no buffer is freed under a send or receive in flight
  // when an error leaves a step early.
  ~Transfers() {
    try {
      wait();
    } catch (...) {  // the error in flight is the one to report
    }
  }

  void send(const Tensor& t, int tag) {
    pending_.push_back(group_.send(t, next_, tag));
    g_stats.bytes_sent += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  void recv(const Tensor& t, int tag) { pending_.push_back(group_.recv(t, prev_, tag)); }
  void wait() {
    if (pending_.empty()) return;
    const Timer timer(g_stats.wait_seconds);
    for (dist::Work& w : pending_) w.wait();
    pending_.clear();
  }

 private:
  dist::ProcessGroup& group_;
  int next_, prev_;
  std::vector<dist::Work> pending_;
};

Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.sizes(), t.options());
}

// The K/V block of each step: step 0 this rank's own, then two buffers in turn, one being
// received into while the other is read (and sent on).
struct KvRing {
  Tensor own_k, own_v;
  Tensor k[2], v[2];

  KvRing(const Tensor& k0, const Tensor& v0, int64_t cp) : own_k(k0), own_v(v0) {
    for (int i = 0; i < (cp > 1 ? 2 : 0); ++i) {
      k[i] = empty_like(k0);
      v[i] = empty_like(v0);
    }
  }
  std::pair<Tensor, Tensor> held(int64_t step) const {
    return step == 0 ? std::pair{own_k, own_v} : std::pair{k[(step - 1) % 2], v[(step - 1) % 2]};
  }
  std::pair<Tensor, Tensor> incoming(int64_t step) const { return {k[step % 2], v[step % 2]}; }
};

// Starts passing this step's K/V block on and receiving the next step's, unless this is the last.
void move_kv(Transfers& moving, const KvRing& ring, int64_t step, int64_t cp) {
  if (step + 1 >= cp) return;
  const auto [k, v] = ring.held(step);
  const auto [k_next, v_next] = ring.incoming(step);
  moving.send(k, kKeys);
  moving.send(v, kValues);
  moving.recv(k_next, kKeys);
  moving.recv(v_next, kValues);
}

std::vector<Tensor> ring_backward(const RingMasks& masks, dist::ProcessGroup& group, const attention::Scores& scores, bool bf16,
                                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout) {
  const int64_t cp = masks.cp_size();
  Tensor dq = Tensor::zeros(q.sizes(), q.options());
  Tensor delta = empty_like(lse);
  KvRing ring(k, v, cp);
  // Each step's dK/dV partial sums, in two buffers: one is on its way to the next rank while the
  // other is gathered.
  Tensor dk_part[2] = {empty_like(k), cp > 1 ? empty_like(k) : Tensor()};
  Tensor dv_part[2] = {empty_like(v), cp > 1 ? empty_like(v) : Tensor()};
  Tensor dk_in = cp > 1 ? empty_like(k) : Tensor(), dv_in = cp > 1 ? empty_like(v) : Tensor();
  Transfers sums_out(group);
  for (int64_t s = 0; s < cp; ++s) {
    Transfers moving(group), sums_in(group);
    move_kv(moving, ring, s, cp);
    // The partial sums for the block held now, gathered by the ranks it visited before.
    if (s > 0) {
      sums_in.recv(dk_in, kKeyGrads);
      sums_in.recv(dv_in, kValueGrads);
    }
    Tensor dk = dk_part[s % 2], dv = dv_part[s % 2];
    {
      const Timer timer(g_stats.compute_seconds);
      dk.zero_();
      dv.zero_();
      const auto [kb, vb] = ring.held(s);
      // Step 0 always runs: it computes delta = rowsum(dO * O) for the steps after it.
      if (s == 0 || masks.step(s).visible_tiles() > 0)
        attention::splash_backward(q, kb, vb, masks.step(s), scores, bf16, s == 0 ? out : Tensor(),
                                   lse, delta, dout, dq, dk, dv, /*accumulate=*/true);
    }
    sums_in.wait();
    if (s > 0) {
      const Timer timer(g_stats.compute_seconds);
      kernels::cpu::accumulate(dk, dk_in);
      kernels::cpu::accumulate(dv, dv_in);
    }
    // The previous step's sums are out of their buffer, which the next step gathers into.
    sums_out.wait();
    if (cp > 1) {
      sums_out.send(dk, kKeyGrads);
      sums_out.send(dv, kValueGrads);
    }
    moving.wait();
  }
  if (cp == 1) return {dq, dk_part[0], dv_part[0]};
  // The last step sent its sums to the next rank, which owns that block; this rank's own come
  // from the previous one.
  Transfers home(group);
  home.recv(dk_in, kKeyGrads);
  home.recv(dv_in, kValueGrads);
  home.wait();
  sums_out.wait();
  return {dq, dk_in, dv_in};
}

}  // namespace

RingMasks RingMasks::build(int64_t batch, int64_t local_seq, const RingAttentionOptions& opts,
                           int64_t cp_rank, int64_t cp_size) {
  constexpr const char* op = "RingMasks::build";
  TITAN_CHECK(
      local_seq > 0 && local_seq % 2 == 0, op,
      ": each rank holds two equal chunks of the sequence (cp_shard's layout), so its token count must be "
      "even, got ",
      local_seq, "; shard a sequence whose length is a multiple of 2 * cp = ", 2 * cp_size, " with cp_shard");
  const int64_t seq = local_seq * cp_size;
  TITAN_CHECK(opts.causal || (!opts.document_ids.defined() && !opts.window_left), op,
              ": attention without the causal rule sees every pair, so it takes no document ids or window; "
              "leave them unset or set causal");
  Mask rule = opts.causal ? Mask::causal() : Mask::every_pair(seq);
  if (opts.document_ids.defined()) {
    const Tensor& ids = opts.document_ids;
    TITAN_CHECK(ids.dim() == 2 && ids.size(0) == batch && ids.size(1) == seq, op,
                ": document_ids must be the GLOBAL ids [B, S] = [", batch, ", ", seq, "] (", local_seq,
                " local tokens x cp ", cp_size, "), got ", ids.desc(), "; pass the ids before cp_shard");
    rule = Mask::document(ids);  // causal within each document
  }
  if (opts.window_left) rule = rule & Mask::sliding_window(*opts.window_left);
  RingMasks masks(cp_rank, cp_size, batch, local_seq);
  const std::vector<int64_t> queries = cp_positions(seq, cp_rank, cp_size);
  for (int64_t s = 0; s < cp_size; ++s) {
    const int64_t src = (cp_rank - s + cp_size) % cp_size;
    masks.steps_.push_back(
        BlockMask::build(Mask::at_positions(rule, queries, cp_positions(seq, src, cp_size)), batch, local_seq,
                         opts.block_q, opts.block_kv));
  }
  return masks;
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingAttentionOptions& opts,
                      dist::ProcessGroup& cp_group) {
  TITAN_CHECK(q.dim() == 4, "ring_attention: expected q [B, S / cp, Hq, D], got ", q.desc());
  return ring_attention(q, k, v,
                        RingMasks::build(q.size(0), q.size(1), opts, cp_group.rank(), cp_group.size()),
                        cp_group, opts.scale, opts.softcap);
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingMasks& masks,
                      dist::ProcessGroup& cp_group, std::optional<double> scale, std::optional<double> softcap) {
  constexpr const char* op = "ring_attention";
  const ops::OpSpan span(op, q, k, v);
  attention::check_qkv(op, q, k, v, scale);
  const int64_t B = q.size(0), L = q.size(1), Hq = q.size(2), D = q.size(3), cp = cp_group.size();
  TITAN_CHECK(masks.cp_rank() == cp_group.rank() && masks.cp_size() == cp, op,
              ": the masks were built for cp rank ", masks.cp_rank(), " of ", masks.cp_size(),
              " but the group '", cp_group.name(), "' has this rank as ", cp_group.rank(), " of ", cp,
              "; build them with the group's rank and size");
  TITAN_CHECK(masks.local_seq() == L && (masks.batch() == B || masks.step(0).batch() == 1), op,
              ": the masks were built for batch ", masks.batch(), " x ", masks.local_seq(),
              " local tokens but q is ", q.desc(), "; build them for this batch");

  const attention::Scores scores = attention::scores_for(op, D, scale, softcap);
  // Decided here, once: backward multiplies as forward did, whatever autocast says when it runs.
  const bool bf16 = matmul_operand_dtype(q.dtype()) == kBF16;
  Tensor qc = ops::dense(q), kc = ops::dense(k), vc = ops::dense(v);
  Tensor out = Tensor::zeros(q.sizes(), q.options());
  Tensor lse = Tensor::full({B, Hq, L}, -std::numeric_limits<double>::infinity(), q.options());
  Tensor part = empty_like(out), part_lse = empty_like(lse);
  KvRing ring(kc, vc, cp);
  for (int64_t s = 0; s < cp; ++s) {
    Transfers moving(cp_group);
    move_kv(moving, ring, s, cp);
    if (masks.step(s).visible_tiles() > 0) {
      const Timer timer(g_stats.compute_seconds);
      const auto [kb, vb] = ring.held(s);
      attention::splash_forward(qc, kb, vb, masks.step(s), scores, bf16, part, part_lse);
      attention::merge_partial_attention(out, lse, part, part_lse);
    }
    moving.wait();
  }
  if (!autograd::needs_grad({&q, &k, &v})) return out;

  autograd::record(op, {q, k, v}, {out},
                   [masks, group = cp_group, scores, bf16, qc, kc, vc, o = out.detach(),
                    lse](const autograd::GradContext& ctx) mutable {
                     std::vector<Tensor> grads =
                         ring_backward(masks, group, scores, bf16, qc, kc, vc, o, lse, ops::dense(ctx[0]));
                     for (size_t i = 0; i < grads.size(); ++i)
                       if (!ctx.needs(i)) grads[i] = Tensor();
                     return grads;
                   });
  return out;
}

const RingAttentionStats& ring_attention_stats() {
  return g_stats;
}

void reset_ring_attention_stats() {
  g_stats = {};
}

}  // namespace titan::parallel
