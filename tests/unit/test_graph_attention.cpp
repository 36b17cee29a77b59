// Attention in graph mode (attention/splash_lowering.cpp) against the eager kernels, forward and
// gradients: both forms (one dense tile up to kDenseMaxSeq, tiles in loops beyond), logit
// soft-capping with a custom scale, causal,
// packed-document, sliding-window, chunked and per-row prefix-LM masks and an | and an & of rules, grouped-query heads, sequences that are not a
// multiple of the tiles, f32 and bf16 products; the tiles of a mask whose document ids are values
// of the captured step; and the rules without a lowering, refused by name.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/attention_cases.h"
#include "support/graph_harness.h"
#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/attention/splash_lowering.h"
#include "titan/core/autocast.h"
#include "titan/graph/lazy.h"

namespace titan {
namespace {

using attention::BlockMask;
using attention::Mask;
using test::tensors_close;

using Rule = test::AttentionRule;
using Case = test::AttentionCase;
using test::packed_ids;

// max |graph - eager| / max |eager| reached on this machine, outputs and gradients alike: f32
// below 6e-7 in both forms; bf16 products 1.2e-3 in the dense form (its probabilities are exps
// relative to the row's final max, the kernel's to a running max, and are rounded to bf16 at
// different values) and 2e-7 in the tiled form with the kernel's tiles, 6e-5 there with a softcap
// (XLA's tanh and the kernel's differ by an ulp, and a few probabilities round to other bf16
// values).
constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;

void check(const Case& c, const attention::SplashOptions& opts = {}) {
  SCOPED_TRACE(c.name);
  std::vector<Tensor> inputs{test::rand_f32({c.B, c.S, c.Hq, c.D}, 1),
                             test::rand_f32({c.B, c.S, c.Hkv, c.D}, 2),
                             test::rand_f32({c.B, c.S, c.Hkv, c.D}, 3)};
  if (c.rule == Rule::document) inputs.push_back(packed_ids(c.B, c.S, 4));
  auto fn = [&c, &opts](const std::vector<Tensor>& in) {
    const Mask rule = test::attention_rule(c.rule, c.B, c.S, c.rule == Rule::document ? in[3] : Tensor());
    const AutocastGuard autocast(c.bf16 ? kBF16 : kF32);
    const BlockMask mask = BlockMask::build(rule, c.B, c.S, c.block_q, c.block_kv);
    return std::vector<Tensor>{attention::splash_attention(in[0], in[1], in[2], mask, opts)};
  };
  const test::GraphEager r = test::run_eager_and_graph(fn, inputs);
  ASSERT_EQ(r.graph.size(), r.eager.size());
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < r.eager.size(); ++i)
    EXPECT_TRUE(tensors_close(r.graph[i], r.eager[i], c.bf16 ? kBf16Tol : kF32Tol, names[i]));
}

// Odd lengths leave the last tile short; block_q != block_kv makes the key ranges of a query
// block uneven.
constexpr int64_t kDense = 37, kTiled = attention::kDenseMaxSeq + 45;

TEST(GraphAttention, DenseCausalGqa) {
  check({"dense causal", 2, kDense, 4, 2, 16, 16, 16, Rule::causal, false});
}
TEST(GraphAttention, DenseDocuments) {
  check({"dense document", 2, kDense, 4, 2, 16, 16, 16, Rule::document, false});
}
TEST(GraphAttention, DenseWindowMultiQuery) {
  check({"dense window", 1, kDense, 4, 1, 8, 16, 16, Rule::window, false});
}
TEST(GraphAttention, TiledCausalGqa) {
  check({"tiled causal", 1, kTiled, 4, 2, 8, 32, 16, Rule::causal, false});
}
TEST(GraphAttention, TiledDocuments) {
  check({"tiled document", 2, kTiled, 2, 1, 8, 16, 32, Rule::document, false});
}
TEST(GraphAttention, TiledWindow) {
  check({"tiled window", 1, kTiled, 2, 2, 8, 32, 32, Rule::window, false});
}
TEST(GraphAttention, TiledChunks) {
  check({"tiled chunked", 1, kTiled, 2, 1, 8, 32, 16, Rule::chunked, false});
}
// A bidirectional prefix per row, and the | and & of rules: the tiles the BlockMask hides are
// skipped, the rule decides the pairs of the others inside the program.
TEST(GraphAttention, DensePrefixLmPerRow) {
  check({"dense prefix_lm", 2, kDense, 2, 1, 8, 16, 16, Rule::prefix_lm, false});
}
TEST(GraphAttention, TiledPrefixLmPerRow) {
  check({"tiled prefix_lm", 2, kTiled, 2, 1, 8, 16, 32, Rule::prefix_lm, false});
}
TEST(GraphAttention, TiledOrOfPrefixAndWindow) {
  check({"tiled prefix | window", 1, kTiled, 2, 2, 8, 32, 16, Rule::prefix_or_window, false});
}
TEST(GraphAttention, TiledAndOfChunksAndWindow) {
  check({"tiled chunked & window", 1, kTiled, 2, 1, 8, 16, 16, Rule::chunked_and_window, false});
}
TEST(GraphAttention, Bf16ProductsDense) {
  check({"bf16 dense", 2, kDense, 4, 2, 16, 16, 16, Rule::document, true});
}
TEST(GraphAttention, Bf16ProductsTiled) {
  check({"bf16 tiled", 1, kTiled, 4, 2, 16, 32, 32, Rule::causal, true});
}

// Logit soft-capping with a scale of its own, under a window, GQA: the program carries both (a
// cap of 0.5 at scores of spread ~0.5 bends them, so a program without it would differ).
constexpr attention::SplashOptions kCapped{.scale = 0.6, .softcap = 0.5};
TEST(GraphAttention, DenseSoftcapWindowScale) {
  check({"dense softcap window", 2, kDense, 4, 2, 16, 16, 16, Rule::window, false}, kCapped);
}
TEST(GraphAttention, TiledSoftcapWindowScale) {
  check({"tiled softcap window", 1, kTiled, 4, 1, 8, 32, 16, Rule::window, false}, kCapped);
  check({"tiled softcap document", 2, kTiled, 2, 1, 8, 16, 32, Rule::document, false}, kCapped);
}
TEST(GraphAttention, Bf16ProductsSoftcap) {
  check({"bf16 tiled softcap", 1, kTiled, 4, 2, 16, 32, 32, Rule::window, true}, kCapped);
}

TEST(GraphAttention, ReferenceCausalAndFull) {
  for (bool causal : {true, false})
    for (const std::optional<double> softcap : {std::optional<double>(), std::optional<double>(0.5)}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "full") + (softcap ? ", softcap" : ""));
      const std::vector<Tensor> inputs{test::rand_f32({2, 29, 4, 8}, 5), test::rand_f32({2, 29, 2, 8}, 6),
                                       test::rand_f32({2, 29, 2, 8}, 7)};
      auto fn = [causal, softcap](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{attention::attention_reference(
            in[0], in[1], in[2], {.causal = causal, .scale = 0.6, .softcap = softcap})};
      };
      const test::GraphEager r = test::run_eager_and_graph(fn, inputs);
      for (size_t i = 0; i < r.eager.size(); ++i) EXPECT_TRUE(tensors_close(r.graph[i], r.eager[i], kF32Tol));
    }
}

// A value of a new capture, for the tests that only record.
Tensor lazy(graph::Program& p, const Shape& shape, DType dtype = kF32) {
  return graph::tensor_of(p.parameter(shape, dtype, "x", graph::InputKind::batch));
}

TEST(GraphAttention, LazyDocumentIdsLeaveTheCausalTilesPartial) {
  graph::Program p;
  const graph::CaptureScope scope(p);
  const Mask rule = Mask::causal() & Mask::document(lazy(p, {2, 40}, kI64));
  EXPECT_TRUE(rule.lazy());
  const BlockMask bm = BlockMask::build(rule, 2, 40, 16, 16);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t qb = 0; qb < bm.num_q_blocks(); ++qb) {
      EXPECT_TRUE(bm.full_kv(b, qb).empty());
      ASSERT_EQ(static_cast<int64_t>(bm.partial_kv(b, qb).size()), qb + 1);
    }
}

TEST(GraphAttention, RulesWithoutALoweringAreRefusedByName) {
  graph::Program p;
  const graph::CaptureScope scope(p);
  const Tensor q = lazy(p, {1, 8, 2, 4}), k = lazy(p, {1, 8, 2, 4}), v = lazy(p, {1, 8, 2, 4});
  std::vector<int64_t> reversed(8);
  for (int64_t i = 0; i < 8; ++i) reversed[static_cast<size_t>(i)] = 7 - i;
  const Mask out_of_order = Mask::at_positions(Mask::causal(), reversed, reversed);
  EXPECT_TITAN_ERROR(attention::splash_attention(q, k, v, BlockMask::build(out_of_order, 1, 8)),
                     out_of_order.describe(), "no lowering");
  const Mask host_docs = Mask::document(Tensor::from_vector(std::vector<int64_t>(8, 0), {1, 8}));
  EXPECT_TITAN_ERROR(attention::splash_attention(q, k, v, BlockMask::build(host_docs, 1, 8)), "host ids");
}

}  // namespace
}  // namespace titan
