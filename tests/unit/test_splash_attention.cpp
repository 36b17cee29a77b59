// Splash attention against an f64 reference (support/masked_attention_reference.h: the scores
// materialised, softmax and its gradient by the formulas), for every mask rule and composition,
// with and without logit soft-capping;
// the rules' tiles against their definitions; packed documents against each document alone; and
// the errors a caller can make.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/masked_attention_reference.h"
#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/mask.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/gradcheck.h"
#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/models/registry.h"
#include "titan/ops/loss.h"
#include "titan/optim/adamw.h"

namespace titan {
namespace {

using attention::BlockMask;
using attention::Mask;
using attention::SplashOptions;
using attention::Visibility;
using test::tensors_close;

using test::AttentionGrads;
using test::masked_attention_reference;
using test::Visible;

struct Rule {
  std::string name;
  Mask mask;
  Visible visible;
  bool exact_classify;  // a single rule: classify never says partial of an empty or full tile
};

std::vector<int64_t> to_i64(const Tensor& ids) {
  return ids.to(kI64).to_vector<int64_t>();
}

// Document ids of packed documents: each row cut into runs of random length.
Tensor packed_ids(int64_t B, int64_t S, std::mt19937& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b) {
    int64_t doc = 0, left = 0;
    for (int64_t s = 0; s < S; ++s, --left) {
      if (left == 0) {
        left = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, S / 3))(rng);
        ++doc;
      }
      ids[b * S + s] = doc;
    }
  }
  return Tensor::from_vector(ids, {B, S});
}

// Ids that jump back and forth, so a document is not one run of tokens.
Tensor scattered_ids(int64_t B, int64_t S, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(B * S));
  for (auto& id : ids) id = std::uniform_int_distribution<int32_t>(0, 2)(rng);
  return Tensor::from_vector(ids, {B, S});
}

// Every rule, and compositions of them, for B rows of S tokens.
std::vector<Rule> rules(int64_t B, int64_t S, std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t left = pick(0, S / 2 + 1), right = pick(1, 9), chunk = pick(1, 40);
  const auto ids = std::make_shared<std::vector<int64_t>>(to_i64(packed_ids(B, S, rng)));
  const Tensor scattered = scattered_ids(B, S, rng);
  const auto sids = std::make_shared<std::vector<int64_t>>(to_i64(scattered));
  std::vector<int64_t> prefixes;
  for (int64_t b = 0; b < B; ++b) prefixes.push_back(pick(0, S + 3));
  const int64_t prefix = pick(0, S);

  const Visible causal = [](int64_t, int64_t q, int64_t k) { return k <= q; };
  const Visible window = [=](int64_t, int64_t q, int64_t k) { return q - left <= k && k <= q; };
  const Visible window2 = [=](int64_t, int64_t q, int64_t k) { return q - left <= k && k <= q + right; };
  const Visible doc = [=](int64_t b, int64_t q, int64_t k) {
    return k <= q && (*ids)[b * S + q] == (*ids)[b * S + k];
  };
  const Visible sdoc = [=](int64_t b, int64_t q, int64_t k) {
    return k <= q && (*sids)[b * S + q] == (*sids)[b * S + k];
  };
  const Visible prefix_rows = [=](int64_t b, int64_t q, int64_t k) { return k <= q || k < prefixes[b]; };
  const Visible prefix_all = [=](int64_t, int64_t q, int64_t k) { return k <= q || k < prefix; };
  const Visible chunked = [=](int64_t, int64_t q, int64_t k) { return k <= q && k / chunk == q / chunk; };
  auto both = [](Visible a, Visible b) {
    return [=](int64_t r, int64_t q, int64_t k) { return a(r, q, k) && b(r, q, k); };
  };
  auto either = [](Visible a, Visible b) {
    return [=](int64_t r, int64_t q, int64_t k) { return a(r, q, k) || b(r, q, k); };
  };

  const Mask m_doc = Mask::document(Tensor::from_vector(*ids, {B, S}));
  const Mask m_window = Mask::sliding_window(left), m_window2 = Mask::sliding_window(left, right);
  const Mask m_prefix = Mask::prefix_lm(prefixes), m_chunked = Mask::chunked_causal(chunk);
  return {
      {"causal", Mask::causal(), causal, true},
      {"sliding_window", m_window, window, true},
      {"sliding_window_right", m_window2, window2, true},
      {"document", m_doc, doc, true},
      {"document_scattered", Mask::document(scattered), sdoc, false},
      {"prefix_lm_per_row", m_prefix, prefix_rows, true},
      {"prefix_lm_all_rows", Mask::prefix_lm({prefix}), prefix_all, true},
      {"chunked_causal", m_chunked, chunked, true},
      {"document_and_window", m_doc & m_window, both(doc, window), false},
      {"chunked_and_window_right", m_chunked & m_window2, both(chunked, window2), false},
      {"prefix_or_window_right", m_prefix | m_window2, either(prefix_rows, window2), false},
      {"chunked_or_window", m_chunked | m_window, either(chunked, window), false},
      {"nested", (m_window | Mask::prefix_lm({prefix})) & m_doc, both(either(window, prefix_all), doc),
       false},
  };
}

// splash_attention's output and the gradients of sum(out * dout).
AttentionGrads run_splash(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                          const BlockMask& bm, const SplashOptions& opts = {}) {
  Tensor lq = q.detach().requires_grad_(), lk = k.detach().requires_grad_(), lv = v.detach().requires_grad_();
  Tensor out = attention::splash_attention(lq, lk, lv, bm, opts);
  std::vector<Tensor> g = autograd::grad({out}, {dout}, {lq, lk, lv});
  return {out.detach(), g[0], g[1], g[2]};
}

Tensor randu(const Shape& s, uint64_t seed, DType dtype, double lo = -1, double hi = 1) {
  Generator gen(seed);
  return Tensor::rand(s, gen, {.dtype = dtype}, lo, hi);
}

// ---- the rules and their tiles ---------------------------------------------------------------------

TEST(SplashMask, FillAndClassifyMatchTheDefinitions) {
  std::mt19937 rng(7);
  for (int64_t S : {1, 5, 67, 130}) {
    const int64_t B = 2;
    for (const Rule& r : rules(B, S, rng)) {
      SCOPED_TRACE(r.name + " S=" + std::to_string(S) + ": " + r.mask.describe());
      for (int64_t b = 0; b < B; ++b) {
        std::vector<uint8_t> all(static_cast<size_t>(S * S));
        r.mask.fill(b, 0, S, 0, S, all.data());
        for (int64_t q = 0; q < S; ++q)
          for (int64_t k = 0; k < S; ++k)
            ASSERT_EQ(all[q * S + k], r.visible(b, q, k) ? 1 : 0) << q << "," << k;
        // Random tiles: classify never contradicts the pairs, and a single rule is exact.
        for (int t = 0; t < 200; ++t) {
          auto pick = [&](int64_t lo, int64_t hi) {
            return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
          };
          const int64_t q0 = pick(0, S - 1), q1 = pick(q0 + 1, S), k0 = pick(0, S - 1), k1 = pick(k0 + 1, S);
          int64_t seen = 0;
          for (int64_t q = q0; q < q1; ++q)
            for (int64_t k = k0; k < k1; ++k) seen += all[q * S + k];
          const Visibility truth = seen == 0                       ? Visibility::none
                                   : seen == (q1 - q0) * (k1 - k0) ? Visibility::full
                                                                   : Visibility::partial;
          const Visibility v = r.mask.classify(b, q0, q1, k0, k1);
          if (r.exact_classify || v != Visibility::partial) {
            EXPECT_EQ(v, truth) << q0 << ".." << q1 << " x " << k0 << ".." << k1;
          }
        }
      }
    }
  }
}

TEST(SplashMask, BlockListsAreExactAndTransposed) {
  std::mt19937 rng(11);
  const int64_t B = 2, S = 101;
  for (const Rule& r : rules(B, S, rng)) {
    for (auto [bq, bk] : {std::pair<int64_t, int64_t>{16, 16}, {8, 32}, {32, 8}, {200, 7}}) {
      SCOPED_TRACE(r.name + " blocks " + std::to_string(bq) + "x" + std::to_string(bk));
      const BlockMask bm = BlockMask::build(r.mask, B, S, bq, bk);
      EXPECT_EQ(bm.batch(), r.mask.batch() == 0 ? 1 : B);
      EXPECT_EQ(bm.num_q_blocks(), (S + bq - 1) / bq);
      EXPECT_EQ(bm.num_kv_blocks(), (S + bk - 1) / bk);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t qb = 0; qb < bm.num_q_blocks(); ++qb)
          for (int64_t kb = 0; kb < bm.num_kv_blocks(); ++kb) {
            int64_t seen = 0, pairs = 0;
            for (int64_t q = qb * bq; q < std::min(S, (qb + 1) * bq); ++q)
              for (int64_t k = kb * bk; k < std::min(S, (kb + 1) * bk); ++k, ++pairs)
                seen += r.visible(b, q, k);
            auto has = [](std::span<const int32_t> l, int64_t x) {
              return std::find(l.begin(), l.end(), x) != l.end();
            };
            EXPECT_EQ(has(bm.full_kv(b, qb), kb), seen == pairs) << b << " " << qb << " " << kb;
            EXPECT_EQ(has(bm.partial_kv(b, qb), kb), seen > 0 && seen < pairs) << b << " " << qb << " " << kb;
            EXPECT_EQ(has(bm.full_q(b, kb), qb), seen == pairs);
            EXPECT_EQ(has(bm.partial_q(b, kb), qb), seen > 0 && seen < pairs);
          }
      for (int64_t qb = 0; qb < bm.num_q_blocks(); ++qb)
        EXPECT_TRUE(std::is_sorted(bm.full_kv(0, qb).begin(), bm.full_kv(0, qb).end()));
    }
  }
}

TEST(SplashMask, WorkIsSkipped) {
  // Causal: the upper triangle of tiles is absent, the diagonal partial, the rest full.
  const BlockMask causal = BlockMask::build(Mask::causal(), 1, 1024, 64, 64);
  for (int64_t qb = 0; qb < 16; ++qb) {
    EXPECT_EQ(causal.full_kv(0, qb).size(), static_cast<size_t>(qb));
    ASSERT_EQ(causal.partial_kv(0, qb).size(), 1u);
    EXPECT_EQ(causal.partial_kv(0, qb)[0], qb);
  }
  // A window of 256 keys touches at most 256/64 + 1 key blocks per query block at any length.
  const BlockMask window = BlockMask::build(Mask::sliding_window(256), 1, 8192, 64, 64);
  for (int64_t qb = 0; qb < window.num_q_blocks(); ++qb)
    EXPECT_LE(window.full_kv(0, qb).size() + window.partial_kv(0, qb).size(), 5u);
  EXPECT_EQ(window.batch(), 1);  // one set of lists serves every row
}

TEST(SplashMask, Describe) {
  const Mask m =
      (Mask::sliding_window(4, 2) | Mask::prefix_lm({3, 5})) & Mask::causal() & Mask::chunked_causal(8);
  EXPECT_EQ(m.describe(), "(sliding_window(4, 2) | prefix_lm(3, 5)) & causal & chunked_causal(8)");
  EXPECT_EQ(m.batch(), 2);
  EXPECT_EQ(Mask::document(Tensor::zeros({3, 9}, {.dtype = kI32})).describe(), "document(ids [3, 9])");
}

// ---- splash against the reference ------------------------------------------------------------------

TEST(SplashAttention, MatchesReferenceForEveryRuleGqaAndBlockSize) {
  std::mt19937 rng(3);
  const int64_t dims[] = {64, 128, 7, 33};
  const std::pair<int64_t, int64_t> blocks[] = {{16, 32}, {32, 16}, {64, 64}, {128, 128}};
  const int64_t ratios[] = {1, 2, 4, 8};
  uint64_t seed = 100;
  for (size_t ri = 0; ri < 4; ++ri) {
    const int64_t B = 2, S = std::uniform_int_distribution<int64_t>(20, 140)(rng);
    const int64_t Hkv = ratios[ri] == 8 ? 1 : 2, Hq = Hkv * ratios[ri];
    const std::vector<Rule> all = rules(B, S, rng);
    for (size_t i = 0; i < all.size(); ++i) {
      const Rule& r = all[i];
      const int64_t D = dims[(i + ri) % 4];
      const auto [bq, bk] = blocks[(i * 3 + ri) % 4];
      SCOPED_TRACE(r.name + ": S=" + std::to_string(S) + " Hq=" + std::to_string(Hq) +
                   " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D) + " blocks " +
                   std::to_string(bq) + "x" + std::to_string(bk));
      Tensor q = randu({B, S, Hq, D}, ++seed, kF32, -2, 2), k = randu({B, S, Hkv, D}, ++seed, kF32, -2, 2);
      Tensor v = randu({B, S, Hkv, D}, ++seed, kF32), dout = randu({B, S, Hq, D}, ++seed, kF32);
      const double scale = D == 7 ? 0.9 : 1.0 / std::sqrt(static_cast<double>(D));
      const AttentionGrads got =
          run_splash(q, k, v, dout, BlockMask::build(r.mask, B, S, bq, bk), {.scale = scale});
      const AttentionGrads want = masked_attention_reference(q, k, v, dout, r.visible, scale);
      EXPECT_TRUE(tensors_close(got.out, want.out, 1e-5, "out"));
      EXPECT_TRUE(tensors_close(got.dq, want.dq, 1e-4, "dq"));
      EXPECT_TRUE(tensors_close(got.dk, want.dk, 1e-4, "dk"));
      EXPECT_TRUE(tensors_close(got.dv, want.dv, 1e-4, "dv"));
    }
  }
}

TEST(SplashAttention, F64MatchesReferenceClosely) {
  std::mt19937 rng(5);
  const int64_t B = 2, S = 77, Hq = 4, Hkv = 2, D = 16;
  for (const Rule& r : rules(B, S, rng)) {
    SCOPED_TRACE(r.name);
    Tensor q = randu({B, S, Hq, D}, 1, kF64, -2, 2), k = randu({B, S, Hkv, D}, 2, kF64, -2, 2);
    Tensor v = randu({B, S, Hkv, D}, 3, kF64), dout = randu({B, S, Hq, D}, 4, kF64);
    const AttentionGrads got = run_splash(q, k, v, dout, BlockMask::build(r.mask, B, S, 16, 8));
    const AttentionGrads want = masked_attention_reference(q, k, v, dout, r.visible, 0.25);
    EXPECT_EQ(got.out.dtype(), kF64);
    EXPECT_TRUE(tensors_close(got.out, want.out, 1e-12, "out"));
    EXPECT_TRUE(tensors_close(got.dq, want.dq, 1e-11, "dq"));
    EXPECT_TRUE(tensors_close(got.dk, want.dk, 1e-11, "dk"));
    EXPECT_TRUE(tensors_close(got.dv, want.dv, 1e-11, "dv"));
  }
}

TEST(SplashAttention, Gradcheck) {
  const int64_t B = 2, S = 9, Hq = 4, Hkv = 2, D = 3;
  std::mt19937 rng(9);
  const Mask doc = Mask::document(packed_ids(B, S, rng));
  for (const Mask& m : {Mask::causal(), doc & Mask::sliding_window(3, 1), Mask::prefix_lm({4, 0}) | doc}) {
    SCOPED_TRACE(m.describe());
    const BlockMask bm = BlockMask::build(m, B, S, 2, 3);
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{attention::splash_attention(in[0], in[1], in[2], bm, {.scale = 0.7})};
    };
    const auto res =
        autograd::gradcheck(fn, {test::rand_f64({B, S, Hq, D}, 1), test::rand_f64({B, S, Hkv, D}, 2),
                                 test::rand_f64({B, S, Hkv, D}, 3)});
    EXPECT_TRUE(res.ok) << res.message;
  }
}

// ---- logit soft-capping ----------------------------------------------------------------------------

// q and k in [-2, 2] with D = 16 give scaled scores of spread ~2.7 at scale 0.5: a cap of 3 bends
// most of them (tanh(0.9) = 0.72), so a kernel that skipped or misplaced the cap fails.
constexpr double kCap = 3.0;

// Every rule with its window or documents, GQA and multi-query heads, a custom and the default
// scale, f32 and f64, against the f64 reference's formulas for the capped scores.
TEST(SplashSoftcap, MatchesReferenceForEveryRuleGqaAndScale) {
  std::mt19937 rng(21);
  const int64_t B = 2, S = 83, D = 16;
  const std::vector<Rule> all = rules(B, S, rng);
  uint64_t seed = 300;
  for (size_t i = 0; i < all.size(); ++i) {
    const Rule& r = all[i];
    const int64_t Hkv = i % 2 == 0 ? 2 : 1, Hq = 4;
    const std::optional<double> scale = i % 3 == 0 ? std::nullopt : std::optional<double>(0.5);
    const DType dtype = i % 4 == 3 ? kF64 : kF32;
    SCOPED_TRACE(r.name + " Hkv=" + std::to_string(Hkv) + (scale ? " scale 0.5" : " default scale") + " " +
                 std::string(dtype_name(dtype)));
    Tensor q = randu({B, S, Hq, D}, ++seed, dtype, -2, 2), k = randu({B, S, Hkv, D}, ++seed, dtype, -2, 2);
    Tensor v = randu({B, S, Hkv, D}, ++seed, dtype), dout = randu({B, S, Hq, D}, ++seed, dtype);
    const AttentionGrads got =
        run_splash(q, k, v, dout, BlockMask::build(r.mask, B, S, 16, 32), {.scale = scale, .softcap = kCap});
    const double s = scale.value_or(0.25);
    const AttentionGrads want = masked_attention_reference(q, k, v, dout, r.visible, s, kCap);
    const double tol = dtype == kF64 ? 1e-11 : 1e-4;
    EXPECT_TRUE(tensors_close(got.out, want.out, dtype == kF64 ? 1e-12 : 1e-5, "out"));
    EXPECT_TRUE(tensors_close(got.dq, want.dq, tol, "dq"));
    EXPECT_TRUE(tensors_close(got.dk, want.dk, tol, "dk"));
    EXPECT_TRUE(tensors_close(got.dv, want.dv, tol, "dv"));
    // The cap must matter at these scores, else the comparison proves nothing.
    const AttentionGrads uncapped = masked_attention_reference(q, k, v, dout, r.visible, s);
    EXPECT_GT(test::max_rel_error(uncapped.out, want.out), 1e-2);
    EXPECT_GT(test::max_rel_error(uncapped.dq, want.dq), 1e-2);
  }
}

// Splash's tiles and the reference path's materialised scores agree with a cap, causal, GQA.
TEST(SplashSoftcap, EqualsTheReferencePath) {
  const int64_t B = 2, S = 70, Hq = 6, Hkv = 2, D = 16;
  Tensor q = randu({B, S, Hq, D}, 1, kF32, -2, 2), k = randu({B, S, Hkv, D}, 2, kF32, -2, 2);
  Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
  for (const std::optional<double> scale : {std::optional<double>(), std::optional<double>(0.7)}) {
    SCOPED_TRACE(scale ? "scale 0.7" : "default scale");
    const AttentionGrads splash = run_splash(q, k, v, dout, BlockMask::build(Mask::causal(), B, S, 32, 16),
                                             {.scale = scale, .softcap = kCap});
    Tensor lq = q.detach().requires_grad_(), lk = k.detach().requires_grad_(),
           lv = v.detach().requires_grad_();
    Tensor out = attention::attention_reference(lq, lk, lv, {.scale = scale, .softcap = kCap});
    const std::vector<Tensor> g = autograd::grad({out}, {dout}, {lq, lk, lv});
    EXPECT_TRUE(tensors_close(splash.out, out.detach(), 1e-5, "out"));
    EXPECT_TRUE(tensors_close(splash.dq, g[0], 1e-4, "dq"));
    EXPECT_TRUE(tensors_close(splash.dk, g[1], 1e-4, "dk"));
    EXPECT_TRUE(tensors_close(splash.dv, g[2], 1e-4, "dv"));
  }
}

// Against finite differences in f64, splash under a window and documents and the reference path,
// with a cap small enough that tanh is far from linear.
TEST(SplashSoftcap, Gradcheck) {
  const int64_t B = 2, S = 9, Hq = 4, Hkv = 2, D = 3;
  std::mt19937 rng(19);
  const BlockMask bm =
      BlockMask::build(Mask::document(packed_ids(B, S, rng)) & Mask::sliding_window(3), B, S, 2, 3);
  const std::vector<Tensor> inputs{test::rand_f64({B, S, Hq, D}, 1, true, -2, 2),
                                   test::rand_f64({B, S, Hkv, D}, 2, true, -2, 2),
                                   test::rand_f64({B, S, Hkv, D}, 3)};
  auto splash = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        attention::splash_attention(in[0], in[1], in[2], bm, {.scale = 0.8, .softcap = 1.5})};
  };
  const auto res = autograd::gradcheck(splash, inputs);
  EXPECT_TRUE(res.ok) << res.message;
  for (bool causal : {true, false}) {
    auto reference = [causal](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{attention::attention_reference(
          in[0], in[1], in[2], {.causal = causal, .scale = 0.8, .softcap = 1.5})};
    };
    const auto ref = autograd::gradcheck(reference, inputs);
    EXPECT_TRUE(ref.ok) << (causal ? "causal: " : "full: ") << ref.message;
  }
}

// bf16 products with a cap, as Bf16AutocastMatchesF32 bounds them without one: the cap is applied
// to f32 scores, so it adds no rounding of its own (measured 2.7e-3..4.2e-3 over out, dq, dk and
// dv; bound 1e-2).
TEST(SplashSoftcap, Bf16AutocastMatchesF32) {
  const int64_t B = 2, S = 150, Hq = 4, Hkv = 2, D = 64;
  std::mt19937 rng(23);
  const Mask mask = Mask::document(packed_ids(B, S, rng)) & Mask::sliding_window(40);
  Tensor q = randu({B, S, Hq, D}, 1, kF32, -2, 2), k = randu({B, S, Hkv, D}, 2, kF32, -2, 2);
  Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
  const BlockMask bm = BlockMask::build(mask, B, S, 64, 32);
  const SplashOptions opts{.softcap = kCap};
  const AttentionGrads f32 = run_splash(q, k, v, dout, bm, opts);
  AttentionGrads bf;
  {
    const AutocastGuard guard(kBF16);
    bf = run_splash(q, k, v, dout, bm, opts);
  }
  const std::pair<const char*, std::pair<Tensor, Tensor>> outputs[] = {
      {"out", {bf.out, f32.out}}, {"dq", {bf.dq, f32.dq}}, {"dk", {bf.dk, f32.dk}}, {"dv", {bf.dv, f32.dv}}};
  for (const auto& [what, pair] : outputs) {
    const double error = test::max_rel_error(pair.first, pair.second);
    EXPECT_LT(error, 1e-2) << what;
    EXPECT_GT(error, 1e-4) << what << ": as float32 gives; did bf16 run?";
  }
}

TEST(SplashSoftcap, ErrorsSayWhatIsWrong) {
  const BlockMask bm = BlockMask::build(Mask::causal(), 1, 8, 4, 4);
  Tensor q = Tensor::zeros({1, 8, 2, 4}), k = Tensor::zeros({1, 8, 1, 4});
  for (double cap : {0.0, -2.0, double(INFINITY)}) {
    EXPECT_TITAN_ERROR(attention::splash_attention(q, k, k, bm, {.softcap = cap}), "splash_attention",
                       "softcap must be finite and > 0");
    EXPECT_TITAN_ERROR(attention::attention_reference(q, k, k, {.softcap = cap}), "attention_reference",
                       "softcap must be finite and > 0");
  }
}

TEST(SplashAttention, PackedDocumentsEqualEachDocumentAlone) {
  const std::vector<int64_t> lengths = {37, 64, 1, 29, 70};
  int64_t S = 0;
  std::vector<int64_t> ids;
  for (size_t d = 0; d < lengths.size(); ++d) {
    ids.insert(ids.end(), static_cast<size_t>(lengths[d]), static_cast<int64_t>(d));
    S += lengths[d];
  }
  const int64_t Hq = 4, Hkv = 2, D = 64;
  Tensor q = randu({1, S, Hq, D}, 1, kF32, -2, 2), k = randu({1, S, Hkv, D}, 2, kF32, -2, 2);
  Tensor v = randu({1, S, Hkv, D}, 3, kF32), dout = randu({1, S, Hq, D}, 4, kF32);
  const Mask docs = Mask::document(Tensor::from_vector(ids, {1, S}));
  const AttentionGrads packed = run_splash(q, k, v, dout, BlockMask::build(docs, 1, S, 32, 32));
  int64_t start = 0;
  for (int64_t len : lengths) {
    SCOPED_TRACE("document at " + std::to_string(start) + " of length " + std::to_string(len));
    auto part = [&](const Tensor& t) { return t.narrow(1, start, len).contiguous(); };
    const AttentionGrads alone =
        run_splash(part(q), part(k), part(v), part(dout), BlockMask::build(Mask::causal(), 1, len, 32, 32));
    // Relative to the whole batch's largest entry: a one-token document's dq and dk are zero up
    // to rounding, which no relative figure of its own can judge.
    auto error = [&](const Tensor& whole, const Tensor& one) {
      double largest = 0;
      for (double x : whole.to_vector<double>()) largest = std::max(largest, std::abs(x));
      return test::max_rel_error(part(whole), one, largest);
    };
    EXPECT_LT(error(packed.out, alone.out), 1e-6);
    EXPECT_LT(error(packed.dq, alone.dq), 1e-5);
    EXPECT_LT(error(packed.dk, alone.dk), 1e-5);
    EXPECT_LT(error(packed.dv, alone.dv), 1e-5);
    start += len;
  }
}

TEST(SplashAttention, BitIdenticalForAnyThreadCount) {
  const int64_t B = 2, S = 200, Hq = 8, Hkv = 2, D = 32;
  std::mt19937 rng(1);
  const BlockMask bm =
      BlockMask::build(Mask::document(packed_ids(B, S, rng)) & Mask::sliding_window(50), B, S, 32, 16);
  Tensor q = randu({B, S, Hq, D}, 1, kF32), k = randu({B, S, Hkv, D}, 2, kF32);
  Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
  for (DType products : {kF32, kBF16}) {
    SCOPED_TRACE(std::string("autocast ") + std::string(dtype_name(products)));
    const AutocastGuard guard(products);
    const int threads = num_threads();
    set_num_threads(1);
    const AttentionGrads one = run_splash(q, k, v, dout, bm);
    set_num_threads(std::max(2, threads));
    const AttentionGrads many = run_splash(q, k, v, dout, bm);
    set_num_threads(threads);
    EXPECT_EQ(one.out.to_vector<float>(), many.out.to_vector<float>());
    EXPECT_EQ(one.dq.to_vector<float>(), many.dq.to_vector<float>());
    EXPECT_EQ(one.dk.to_vector<float>(), many.dk.to_vector<float>());
    EXPECT_EQ(one.dv.to_vector<float>(), many.dv.to_vector<float>());
  }
}

TEST(SplashAttention, GradientsOfSomeInputsOnly) {
  // Backward leaves out what is not asked for, and what it computes does not change.
  const int64_t B = 2, S = 150, Hq = 4, Hkv = 1, D = 8;
  std::mt19937 rng(2);
  const BlockMask bm =
      BlockMask::build(Mask::document(packed_ids(B, S, rng)) & Mask::sliding_window(40), B, S, 16, 32);
  Tensor q = randu({B, S, Hq, D}, 1, kF32), k = randu({B, S, Hkv, D}, 2, kF32);
  Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
  const AttentionGrads all = run_splash(q, k, v, dout, bm);
  const std::vector<Tensor> want = {all.dq, all.dk, all.dv};
  for (const std::vector<int>& which : std::vector<std::vector<int>>{{0}, {1}, {2}, {1, 2}, {0, 2}}) {
    std::vector<Tensor> in = {q.detach(), k.detach(), v.detach()}, wrt;
    for (int i : which) wrt.push_back(in[i].requires_grad_());
    Tensor out = attention::splash_attention(in[0], in[1], in[2], bm);
    const std::vector<Tensor> got = autograd::grad({out}, {dout}, wrt);
    for (size_t j = 0; j < which.size(); ++j)
      EXPECT_EQ(got[j].to_vector<float>(), want[which[j]].to_vector<float>()) << "input " << which[j];
  }
}

TEST(SplashAttention, MemoryGrowsLinearlyWithSeq) {
  // Forward + backward at S and 4S: a [S, S] tensor anywhere would make the peak grow 16-fold.
  auto peak = [](int64_t S) {
    const int64_t Hq = 2, Hkv = 1, D = 64;
    Tensor q = randu({1, S, Hq, D}, 1, kF32), k = randu({1, S, Hkv, D}, 2, kF32);
    Tensor v = randu({1, S, Hkv, D}, 3, kF32), dout = randu({1, S, Hq, D}, 4, kF32);
    const BlockMask bm = BlockMask::build(Mask::causal(), 1, S);
    CpuAllocator::instance().reset_peak();
    const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
    run_splash(q, k, v, dout, bm);
    return static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes - before);
  };
  const double small = peak(512), large = peak(2048);
  EXPECT_LT(large, 4.5 * small) << small << " -> " << large << " bytes";
  EXPECT_LT(large, 2048.0 * 2048.0 * 4) << "as much as one [S, S] f32 tensor";
}

TEST(SplashAttention, ErrorsSayWhatIsWrong) {
  const BlockMask bm = BlockMask::build(Mask::causal(), 2, 8, 4, 4);
  Tensor q = Tensor::zeros({2, 8, 4, 16}), k = Tensor::zeros({2, 8, 2, 16}), v = Tensor::zeros({2, 8, 2, 16});
  EXPECT_TITAN_ERROR(attention::splash_attention(q, Tensor::zeros({2, 8, 2, 8}), v, bm), "splash_attention",
                     "same B, S and D");
  EXPECT_TITAN_ERROR(
      attention::splash_attention(q, Tensor::zeros({2, 7, 2, 16}), Tensor::zeros({2, 7, 2, 16}), bm),
      "same B, S and D");
  EXPECT_TITAN_ERROR(
      attention::splash_attention(q, Tensor::zeros({2, 8, 3, 16}), Tensor::zeros({2, 8, 3, 16}), bm),
      "query heads (4) must be a multiple of key/value heads (3)");
  EXPECT_TITAN_ERROR(attention::splash_attention(q.to(kF64), k, v, bm), "share a dtype");
  EXPECT_TITAN_ERROR(attention::splash_attention(q, k, v, BlockMask::build(Mask::causal(), 2, 9)),
                     "built for seq 9", "8 tokens");
  EXPECT_TITAN_ERROR(attention::splash_attention(q, k, v, bm, {.scale = INFINITY}), "scale must be finite");

  const Tensor ids = Tensor::zeros({2, 8}, {.dtype = kI64});
  const BlockMask three_rows = BlockMask::build(Mask::document(Tensor::zeros({3, 8}, {.dtype = kI64})), 3, 8);
  EXPECT_TITAN_ERROR(attention::splash_attention(q, k, v, three_rows), "holds 3 batch rows", "q has 2");
  EXPECT_TITAN_ERROR(BlockMask::build(Mask::document(ids), 2, 9), "ids for 8 tokens", "sequence has 9",
                     "one document id per token");
  EXPECT_TITAN_ERROR(BlockMask::build(Mask::document(ids), 3, 8), "for 2 batch rows", "batch has 3");
  EXPECT_TITAN_ERROR(BlockMask::build(Mask::prefix_lm({1, 2, 3}), 2, 8), "for 3 batch rows");
  EXPECT_TITAN_ERROR(BlockMask::build(Mask::causal(), 2, 8, 0, 4), "block sizes must be >= 1");
  EXPECT_TITAN_ERROR(Mask::document(Tensor::zeros({8})), "[batch, seq] of i32 or i64");
  EXPECT_TITAN_ERROR(Mask::document(Tensor::zeros({2, 8})), "[batch, seq] of i32 or i64");
  EXPECT_TITAN_ERROR(Mask::document(ids) & Mask::prefix_lm({1, 2, 3}), "cannot combine",
                     "different batch sizes");
  EXPECT_TITAN_ERROR(Mask::document(ids) | Mask::document(Tensor::zeros({2, 9}, {.dtype = kI64})),
                     "different sequence lengths");
  EXPECT_TITAN_ERROR(Mask::sliding_window(-1), "left and right must be >= 0");
  EXPECT_TITAN_ERROR(Mask::chunked_causal(0), "chunk must be >= 1");
  EXPECT_TITAN_ERROR(Mask::prefix_lm({}), "one prefix length per batch row");
  EXPECT_TITAN_ERROR(Mask::prefix_lm({-2}), "must be >= 0");
}

// ---- bf16 autocast ----------------------------------------------------------------------------------

// Splash with its forward under autocast `fwd` and its backward under `bwd`.
AttentionGrads run_splash_autocast(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                   const BlockMask& bm, DType fwd, DType bwd) {
  Tensor lq = q.detach().requires_grad_(), lk = k.detach().requires_grad_(), lv = v.detach().requires_grad_();
  Tensor out;
  {
    const AutocastGuard guard(fwd);
    out = attention::splash_attention(lq, lk, lv, bm);
  }
  const AutocastGuard guard(bwd);
  std::vector<Tensor> g = autograd::grad({out}, {dout}, {lq, lk, lv});
  return {out.detach(), g[0], g[1], g[2]};
}

// Under bf16 autocast the tiles multiply bf16 operands (8 significant bits, relative rounding
// 2^-9) with float32 sums, so each output and gradient is off the float32 splash's by a few
// bf16 roundings of its terms, partly averaged out. Measured as the largest error over the
// largest float32 value (D = 64 and 33; causal, documents, window, both; GQA; S past whole
// blocks): 4.3e-3..5.5e-3 for out, 2.1e-3..5.9e-3 for dq, dk, dv. The bound, 1e-2, leaves 1.7x
// and still fails a kernel that truncates to bf16 instead of rounding (1.5e-2), drops an odd
// D's last term (0.5), swaps the terms of a pair (3.2) or multiplies a stale P tile (2.5). And
// bf16 must show: float32 splash differs from itself in another order by ~1e-7, so an error
// under 1e-4 means bf16 never ran.
TEST(SplashAttention, Bf16AutocastMatchesF32) {
  const int64_t B = 2, S = 203, Hq = 4, Hkv = 2;
  std::mt19937 rng(13);
  const Mask doc = Mask::document(packed_ids(B, S, rng));
  const std::pair<std::string, Mask> masks[] = {{"causal", Mask::causal()},
                                                {"document", doc},
                                                {"window", Mask::sliding_window(50)},
                                                {"document_and_window", doc & Mask::sliding_window(30)}};
  for (int64_t D : {64, 33})
    for (const auto& [name, mask] : masks) {
      SCOPED_TRACE(name + " D=" + std::to_string(D));
      Tensor q = randu({B, S, Hq, D}, 1, kF32, -2, 2), k = randu({B, S, Hkv, D}, 2, kF32, -2, 2);
      Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
      const BlockMask bm = BlockMask::build(mask, B, S, 64, 32);
      const AttentionGrads f32 = run_splash(q, k, v, dout, bm);
      const AttentionGrads bf = run_splash_autocast(q, k, v, dout, bm, kBF16, kBF16);
      EXPECT_EQ(bf.out.dtype(), kF32);
      EXPECT_EQ(bf.dq.dtype(), kF32);
      const std::pair<const char*, std::pair<Tensor, Tensor>> outputs[] = {{"out", {bf.out, f32.out}},
                                                                           {"dq", {bf.dq, f32.dq}},
                                                                           {"dk", {bf.dk, f32.dk}},
                                                                           {"dv", {bf.dv, f32.dv}}};
      for (const auto& [what, pair] : outputs) {
        const double error = test::max_rel_error(pair.first, pair.second);
        EXPECT_LT(error, 1e-2) << what;
        EXPECT_GT(error, 1e-4) << what << ": as float32 gives; did bf16 run?";
      }
    }
}

// The forward decides; backward follows it whatever autocast says when backward runs.
TEST(SplashAttention, Bf16BackwardFollowsItsForward) {
  const int64_t B = 1, S = 150, Hq = 4, Hkv = 1, D = 32;
  Tensor q = randu({B, S, Hq, D}, 1, kF32, -2, 2), k = randu({B, S, Hkv, D}, 2, kF32, -2, 2);
  Tensor v = randu({B, S, Hkv, D}, 3, kF32), dout = randu({B, S, Hq, D}, 4, kF32);
  const BlockMask bm = BlockMask::build(Mask::causal(), B, S, 32, 64);
  const AttentionGrads f32 = run_splash(q, k, v, dout, bm);
  const AttentionGrads bf = run_splash_autocast(q, k, v, dout, bm, kBF16, kBF16);
  for (const auto& [fwd, bwd, want] : {std::tuple{kBF16, kF32, &bf}, std::tuple{kF32, kBF16, &f32}}) {
    SCOPED_TRACE(std::string("forward ") + std::string(dtype_name(fwd)) + ", backward " +
                 std::string(dtype_name(bwd)));
    const AttentionGrads got = run_splash_autocast(q, k, v, dout, bm, fwd, bwd);
    EXPECT_EQ(got.out.to_vector<float>(), want->out.to_vector<float>());
    EXPECT_EQ(got.dq.to_vector<float>(), want->dq.to_vector<float>());
    EXPECT_EQ(got.dk.to_vector<float>(), want->dk.to_vector<float>());
    EXPECT_EQ(got.dv.to_vector<float>(), want->dv.to_vector<float>());
  }
  EXPECT_NE(bf.dq.to_vector<float>(), f32.dq.to_vector<float>());
}

// ---- in Llama 3 -------------------------------------------------------------------------------------

TEST(Llama3SplashAttention, TrainsToTheReferenceLossesOver20Steps) {
  // The debug model through the registry, as the trainer builds it, with tiles that do not divide
  // the sequence, learning one batch by heart.
  const int64_t B = 2, S = 70, vocab = 300;
  std::mt19937 rng(1);
  std::vector<int64_t> ids(static_cast<size_t>(B * (S + 1)));
  for (auto& id : ids) id = std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng);
  const Tensor all = Tensor::from_vector(ids, {B, S + 1});
  const Tensor inputs = all.narrow(1, 0, S).contiguous(), targets = all.narrow(1, 1, S).contiguous();
  auto train = [&](const std::string& kernel) {
    models::ModelConfig cfg{.flavor = "debugmodel", .attention = kernel, .vocab_size = vocab};
    cfg.attn.block_q = 32;
    cfg.attn.block_kv = 48;
    Generator gen(0);
    auto model = models::get_train_spec("llama3").build(cfg, S, gen);
    optim::AdamW optimizer(model->named_parameters(), {.lr = 1e-3});
    std::vector<double> losses;
    for (int step = 0; step < 20; ++step) {
      Tensor loss = ops::cross_entropy((*model)(inputs), targets);
      loss.backward();
      optimizer.step();
      optimizer.zero_grad();
      losses.push_back(loss.item());
    }
    return losses;
  };
  const std::vector<double> splash = train("splash"), reference = train("reference");
  for (size_t i = 0; i < splash.size(); ++i)
    EXPECT_NEAR(splash[i], reference[i], 1e-4 * reference[i]) << "step " << i;
  EXPECT_LT(splash.back(), splash.front() - 1) << "the loss should fall";
}

}  // namespace
}  // namespace titan
