// Ring attention against splash attention on the whole sequence: every rank builds the same
// global q, k, v and output gradient, computes the one-rank reference, then runs ring attention
// on its cp_shard slices and compares its slices of the output and of dq, dk, dv.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "titan/attention/block_mask.h"
#include "titan/attention/mask.h"
#include "titan/attention/splash.h"
#include "titan/core/autocast.h"
#include "titan/core/rng.h"
#include "titan/dist/process_group.h"
#include "titan/parallel/context_parallel.h"
#include "trainer_fixture.h"

namespace titan::parallel {
namespace {

using train::testing::error_of;

using attention::BlockMask;
using attention::Mask;

struct Case {
  int64_t B = 2, S = 2048, Hq = 2, Hkv = 2, D = 16;
  DType dtype = kF64;
  bool documents = false;
  int64_t block = attention::kDefaultBlockQ;
  bool causal = true;
};

// max |a - b| / max |ref|.
double rel_error(const Tensor& a, const Tensor& ref) {
  const std::vector<double> x = a.to(kF64).contiguous().to_vector<double>();
  const std::vector<double> y = ref.to(kF64).contiguous().to_vector<double>();
  double diff = 0, top = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    top = std::max(top, std::abs(y[i]));
  }
  return x.size() == y.size() ? diff / top : INFINITY;
}

// Documents of random lengths (boundaries anywhere, mostly not on chunk edges), different per row.
Tensor document_ids(int64_t B, int64_t S, Generator& gen) {
  const std::vector<double> u = Tensor::rand({B, S}, gen, {.dtype = kF64}).to_vector<double>();
  std::vector<int64_t> ids(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b) {
    int64_t doc = 0;
    for (int64_t s = 0; s < S; ++s) {
      if (s > 0 && u[b * S + s] < 6.0 / static_cast<double>(S)) ++doc;  // about 6 documents a row
      ids[b * S + s] = doc;
    }
  }
  return Tensor::from_vector(ids, {B, S});
}

struct Result {
  Tensor out, dq, dk, dv;
};

// Splash attention on the whole sequence, forward and backward.
Result reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& ids,
                 int64_t block, bool causal = true) {
  Tensor ql = q.detach().clone().requires_grad_(), kl = k.detach().clone().requires_grad_(),
         vl = v.detach().clone().requires_grad_();
  const int64_t S = q.size(1);
  const Mask rule = ids.defined() ? Mask::document(ids) : causal ? Mask::causal() : Mask::sliding_window(S, S);
  const BlockMask mask = BlockMask::build(rule, q.size(0), q.size(1), block, block);
  Tensor out = attention::splash_attention(ql, kl, vl, mask);
  out.backward(dout);
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

// Ring attention on this rank's slices, forward and backward.
Result ring(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& ids,
            int64_t block, dist::ProcessGroup& group, bool causal = true) {
  const int r = group.rank(), n = group.size();
  Tensor ql = cp_shard(q, 1, r, n).requires_grad_(), kl = cp_shard(k, 1, r, n).requires_grad_(),
         vl = cp_shard(v, 1, r, n).requires_grad_();
  Tensor out = ring_attention(
      ql, kl, vl, {.causal = causal, .document_ids = ids, .block_q = block, .block_kv = block}, group);
  out.backward(cp_shard(dout, 1, r, n));
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

void expect_matches(const Case& c, dist::ProcessGroup& group) {
  Generator gen(1234);
  const TensorOptions opts{.dtype = c.dtype};
  const Tensor q = Tensor::randn({c.B, c.S, c.Hq, c.D}, gen, opts);
  const Tensor k = Tensor::randn({c.B, c.S, c.Hkv, c.D}, gen, opts);
  const Tensor v = Tensor::randn({c.B, c.S, c.Hkv, c.D}, gen, opts);
  const Tensor dout = Tensor::randn({c.B, c.S, c.Hq, c.D}, gen, opts);
  const Tensor ids = c.documents ? document_ids(c.B, c.S, gen) : Tensor();
  const Result want = reference(q, k, v, dout, ids, c.block, c.causal);
  const Result got = ring(q, k, v, dout, ids, c.block, group, c.causal);
  const double tol = c.dtype == kF64 ? 1e-12 : 1e-5;
  const int r = group.rank(), n = group.size();
  const std::string where = "cp rank " + std::to_string(r) + " of " + std::to_string(n);
  EXPECT_LE(rel_error(got.out, cp_shard(want.out, 1, r, n)), tol) << "out, " << where;
  EXPECT_LE(rel_error(got.dq, cp_shard(want.dq, 1, r, n)), tol) << "dq, " << where;
  EXPECT_LE(rel_error(got.dk, cp_shard(want.dk, 1, r, n)), tol) << "dk, " << where;
  EXPECT_LE(rel_error(got.dv, cp_shard(want.dv, 1, r, n)), tol) << "dv, " << where;
}

TEST(ContextParallel, CausalF64MatchesSplash) {
  expect_matches({}, dist::world());
}

TEST(ContextParallel, CausalF32MatchesSplash) {
  expect_matches({.S = 1024, .dtype = kF32}, dist::world());
}

// FLUX's joint attention: every query sees every key, whichever rank holds it.
TEST(ContextParallel, EveryPairF64MatchesSplash) {
  expect_matches({.S = 1024, .causal = false}, dist::world());
}

TEST(ContextParallel, EveryPairF32GroupedQueries) {
  expect_matches({.B = 1, .S = 512, .Hq = 4, .Hkv = 2, .dtype = kF32, .causal = false}, dist::world());
}

TEST(ContextParallel, EveryPairTakesNoDocumentsOrWindow) {
  const Tensor ids = Tensor::zeros({1, 64}, {.dtype = kI64});
  for (const RingAttentionOptions& opts :
       {RingAttentionOptions{.causal = false, .document_ids = ids}, RingAttentionOptions{.causal = false, .window_left = 8}}) {
    const std::string msg = error_of([&] { (void)RingMasks::build(1, 64 / dist::world().size(), opts, 0, dist::world().size()); });
    EXPECT_NE(msg.find("takes no document ids or window"), std::string::npos) << msg;
  }
}

TEST(ContextParallel, GroupedQueryAttention) {
  expect_matches({.B = 1, .S = 1024, .Hq = 4, .Hkv = 2}, dist::world());
}

TEST(ContextParallel, DocumentsWithBoundariesInsideChunks) {
  expect_matches({.S = 1024, .documents = true}, dist::world());
}

// Tiles of 96 rows straddle the two chunks a rank holds (chunks of 128 with 4 ranks), so the
// masks cut them into runs of consecutive positions.
TEST(ContextParallel, TilesAcrossChunkEdges) {
  expect_matches({.B = 1, .S = 1024, .documents = true, .block = 96}, dist::world());
}

// Under bf16 autocast the tiles multiply bf16 copies, as splash attention's do: ring attention
// then matches splash under autocast well within bf16's rounding (each partial result rounds its
// own probabilities: 5e-4 apart at 4 ranks), and stays clearly off the f32 result (4e-3).
TEST(ContextParallel, Bf16AutocastMultipliesAsSplash) {
  dist::ProcessGroup& group = dist::world();
  const int r = group.rank(), n = group.size();
  Generator gen(11);
  const Tensor q = Tensor::randn({1, 512, 2, 16}, gen), k = Tensor::randn({1, 512, 1, 16}, gen);
  const Tensor v = Tensor::randn({1, 512, 1, 16}, gen), dout = Tensor::randn({1, 512, 2, 16}, gen);
  const Result f32 = ring(q, k, v, dout, Tensor(), 64, group);
  const AutocastGuard bf16(kBF16);
  const Result want = reference(q, k, v, dout, Tensor(), 64), got = ring(q, k, v, dout, Tensor(), 64, group);
  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {got.out, want.out}, {got.dq, want.dq}, {got.dk, want.dk}, {got.dv, want.dv}};
  for (const auto& [mine, theirs] : pairs) EXPECT_LE(rel_error(mine, cp_shard(theirs, 1, r, n)), 2e-3);
  EXPECT_GT(rel_error(got.out, f32.out), 1e-3) << "bf16 products were not used";
}

// Two rings of two ranks side by side: ranks {0, 1} and {2, 3}.
TEST(ContextParallel, SplitIntoRingsOfTwo) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  dist::ProcessGroup cp = dist::world().split(dist::world().rank() / 2, dist::world().rank(), "cp");
  expect_matches({}, cp);
}

// A ring of one is splash attention itself.
TEST(ContextParallel, OneRankIsSplashBitForBit) {
  Generator gen(7);
  const Tensor q = Tensor::randn({2, 256, 2, 8}, gen, {.dtype = kF64});
  const Tensor k = Tensor::randn({2, 256, 1, 8}, gen, {.dtype = kF64});
  const Tensor v = Tensor::randn({2, 256, 1, 8}, gen, {.dtype = kF64});
  const Tensor dout = Tensor::randn({2, 256, 2, 8}, gen, {.dtype = kF64});
  const Tensor ids = document_ids(2, 256, gen);
  dist::ProcessGroup one = dist::ProcessGroup::single("cp");
  const Result want = reference(q, k, v, dout, ids, 64), got = ring(q, k, v, dout, ids, 64, one);
  EXPECT_EQ(got.out.to_vector<double>(), want.out.to_vector<double>());
  EXPECT_EQ(got.dq.to_vector<double>(), want.dq.to_vector<double>());
  EXPECT_EQ(got.dk.to_vector<double>(), want.dk.to_vector<double>());
  EXPECT_EQ(got.dv.to_vector<double>(), want.dv.to_vector<double>());
}

// Forward passes each K and V block on cp - 1 times; backward does too, and each block's dK/dV
// sums travel cp times (the last hop home).
TEST(ContextParallel, StatsCountTheBytesOnTheRing) {
  dist::ProcessGroup& group = dist::world();
  const int64_t n = group.size();
  Generator gen(3);
  const Tensor q = Tensor::randn({1, 32 * n, 2, 8}, gen).requires_grad_();
  const Tensor kv = Tensor::randn({1, 32 * n, 1, 8}, gen).requires_grad_();
  reset_ring_attention_stats();
  ring_attention(q, kv, kv, {}, group).backward(Tensor::ones({1, 32 * n, 2, 8}));
  const int64_t block = 32 * n * 8 * 4;  // bytes of one rank's K (or V)
  EXPECT_EQ(ring_attention_stats().bytes_sent, n == 1 ? 0 : 2 * block * ((n - 1) + (n - 1) + n));
  EXPECT_GE(ring_attention_stats().compute_seconds, 0.0);
}

// Masks built once per batch serve every layer, and give what the options build each call.
TEST(ContextParallel, PrebuiltMasksServeEveryLayer) {
  dist::ProcessGroup& group = dist::world();
  const int r = group.rank(), n = group.size();
  Generator gen(5);
  const Tensor ids = document_ids(1, 256, gen);
  const RingAttentionOptions opts{.document_ids = ids, .block_q = 32, .block_kv = 32};
  const RingMasks masks = RingMasks::build(1, 256 / n, opts, r, n);
  for (int layer = 0; layer < 2; ++layer) {
    const Tensor q = cp_shard(Tensor::randn({1, 256, 2, 8}, gen, {.dtype = kF64}), 1, r, n);
    const Tensor k = cp_shard(Tensor::randn({1, 256, 2, 8}, gen, {.dtype = kF64}), 1, r, n);
    EXPECT_EQ(ring_attention(q, k, k, masks, group).to_vector<double>(),
              ring_attention(q, k, k, opts, group).to_vector<double>());
  }
  const RingMasks other = RingMasks::build(1, 256 / n, opts, (r + 1) % n, n);
  const Tensor q = Tensor::zeros({1, 256 / n, 2, 8}, {.dtype = kF64});
  if (n > 1) {
    EXPECT_NE(error_of([&] { ring_attention(q, q, q, other, group); }).find("masks were built for cp rank"),
              std::string::npos);
  }
}

TEST(ContextParallel, UnshardInvertsShard) {
  dist::ProcessGroup& group = dist::world();
  const int64_t n = group.size();
  const Tensor x = Tensor::arange(3 * 4 * n * 2).view({3, 4 * n, 2});
  const Tensor local = cp_shard(x, 1, group.rank(), n);
  EXPECT_EQ(cp_unshard(local, 1, group).to_vector<int64_t>(), x.to_vector<int64_t>());
  const Tensor y = Tensor::arange(4 * n * 3).view({4 * n, 3});
  EXPECT_EQ(cp_unshard(cp_shard(y, 0, group.rank(), n), 0, group).to_vector<int64_t>(),
            y.to_vector<int64_t>());
}

TEST(ContextParallel, SequenceNotDivisibleByTwiceCpIsRefused) {
  dist::ProcessGroup& group = dist::world();
  const int64_t n = group.size();
  const std::string twice = std::to_string(2 * n);
  const Tensor x = Tensor::zeros({1, 2 * n * 8 + n, 1, 4});
  const std::string shard = error_of([&] { cp_shard(x, 1, group.rank(), n); });
  EXPECT_NE(shard.find("multiple of " + twice), std::string::npos) << shard;
  EXPECT_NE(shard.find(std::to_string(2 * n * 8 + n)), std::string::npos) << shard;
  const Tensor odd = Tensor::zeros({1, 7, 1, 4});
  const std::string attend = error_of([&] { ring_attention(odd, odd, odd, {}, group); });
  EXPECT_NE(attend.find("must be even, got 7"), std::string::npos) << attend;
  const Tensor ids = Tensor::zeros({1, 8}, {.dtype = kI64});
  const Tensor q = Tensor::zeros({1, 8, 1, 4});
  const std::string global = error_of([&] { ring_attention(q, q, q, {.document_ids = ids}, group); });
  if (n > 1) {
    EXPECT_NE(global.find("GLOBAL ids"), std::string::npos) << global;
  }
}

}  // namespace
}  // namespace titan::parallel
