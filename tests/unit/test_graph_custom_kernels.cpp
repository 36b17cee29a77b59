// titan's kernels as custom calls inside graph mode (attention/splash_custom_call.h,
// train/graph_mode/custom_kernels.h): splash attention's forward and backward called from the program match
// the eager kernel for causal, packed-document, sliding-window and chunked masks, grouped heads,
// odd lengths and bf16 products, inside a loop over layers too; rules the calls cannot carry keep
// XLA's lowering; the trainer with the kernels on and off matches eager and says which ran.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/attention_cases.h"
#include "support/graph_harness.h"
#include "support/small_run.h"
#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/splash.h"
#include "titan/autograd/scan.h"
#include "titan/core/autocast.h"
#include "titan/graph/pjrt/ffi.h"
#include "titan/ops/activation.h"
#include "titan/ops/arith.h"
#include "titan/ops/linalg.h"
#include "titan/ops/norm.h"
#include "titan/train/graph_mode/custom_kernels.h"

namespace titan {
namespace {

using attention::BlockMask;
using attention::Mask;

// The custom calls run where the test runner's plugin allows them; elsewhere (a CUDA plugin, one
// without the FFI extension) the tests that need them are skipped, saying why.
#define SKIP_WITHOUT_CUSTOM_KERNELS()                                                        \
  do {                                                                                       \
    const train::CustomKernels ck = train::enable_custom_kernels(test::test_runner(), true); \
    if (!ck.on) GTEST_SKIP() << ck.note;                                                     \
  } while (0)

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

using Rule = test::AttentionRule;
using Case = test::AttentionCase;
using test::packed_ids;

// The same kernel runs both ways, so f32 agrees to rounding; bf16 products too (the same tiles are
// rounded at the same values).
constexpr double kTol = 1e-5;

test::GraphEager run_case(const Case& c, bool custom_kernels, const attention::SplashOptions& opts = {}) {
  std::vector<Tensor> inputs{test::rand_f32({c.B, c.S, c.Hq, c.D}, 1),
                             test::rand_f32({c.B, c.S, c.Hkv, c.D}, 2),
                             test::rand_f32({c.B, c.S, c.Hkv, c.D}, 3)};
  if (c.rule == Rule::document) inputs.push_back(packed_ids(c.B, c.S, 4));
  auto fn = [&c, &opts](const std::vector<Tensor>& in) {
    const Mask rule = test::attention_rule(c.rule, c.B, c.S, in.size() > 3 ? in[3] : Tensor());
    const AutocastGuard autocast(c.bf16 ? kBF16 : kF32);
    const BlockMask mask = BlockMask::build(rule, c.B, c.S, c.block_q, c.block_kv);
    return std::vector<Tensor>{attention::splash_attention(in[0], in[1], in[2], mask, opts)};
  };
  return test::run_eager_and_graph(fn, inputs, true, false, custom_kernels);
}

// Each graph result within `tol` of eager's, named in the failure.
void expect_close(const test::GraphEager& r, const std::vector<const char*>& names, double tol) {
  ASSERT_EQ(r.graph.size(), r.eager.size());
  for (size_t i = 0; i < r.eager.size(); ++i)
    EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), tol) << (i < names.size() ? names[i] : "result");
}

void expect_matches(const Case& c, const test::GraphEager& r) {
  ASSERT_EQ(r.graph.size(), r.eager.size());
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < r.eager.size(); ++i)
    EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), kTol) << c.name << " " << names[i];
}

void check_called(const Case& c, const attention::SplashOptions& opts = {}) {
  SCOPED_TRACE(c.name);
  const test::GraphEager r = run_case(c, true, opts);
  // The cap is an attribute only where there is one: programs without it read as before.
  EXPECT_EQ(has(r.module, "softcap"), opts.softcap.has_value());
  EXPECT_TRUE(has(r.module, "titan_splash_fwd")) << "forward did not run as a custom call";
  EXPECT_TRUE(has(r.module, "titan_splash_bwd")) << "backward did not run as a custom call";
  EXPECT_FALSE(has(r.module, "stablehlo.while")) << "XLA's tiles were lowered too";
  expect_matches(c, r);
}

TEST(GraphCustomKernels, SplashCausalGqaOddLength) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"causal", 2, 109, 4, 2, 16, 32, 16, Rule::causal, false});
}
TEST(GraphCustomKernels, SplashDocuments) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"document", 2, 77, 2, 1, 8, 16, 32, Rule::document, false});
}
TEST(GraphCustomKernels, SplashWindowAndChunks) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"window", 1, 83, 2, 2, 8, 32, 32, Rule::window, false});
  check_called({"chunked", 1, 96, 2, 1, 8, 32, 16, Rule::chunked, false});
}
TEST(GraphCustomKernels, SplashShortSequenceOneTile) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"short", 3, 7, 2, 1, 4, 128, 128, Rule::causal, false});
}
TEST(GraphCustomKernels, SplashSoftcapAndScale) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"softcap window", 1, 83, 4, 2, 8, 32, 16, Rule::window, false},
               {.scale = 0.6, .softcap = 0.5});
  check_called({"bf16 softcap document", 2, 70, 4, 2, 16, 32, 32, Rule::document, true}, {.softcap = 0.5});
}
TEST(GraphCustomKernels, SplashBf16Products) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  check_called({"bf16 document", 2, 70, 4, 2, 16, 32, 32, Rule::document, true});
}

// A rule the calls cannot carry (an |) keeps XLA's lowering in the same program; so does every
// rule with the kernels off, whatever the plugin.
TEST(GraphCustomKernels, OtherRulesAndKernelsOffKeepXlasLowering) {
  const Case either{"causal | window", 1, 70, 2, 1, 8, 32, 32, Rule::window_or_causal, false};
  const test::GraphEager r = run_case(either, true);
  EXPECT_FALSE(has(r.module, "titan_splash"));
  expect_matches(either, r);
  const Case off{"document, kernels off", 2, 77, 2, 1, 8, 16, 32, Rule::document, false};
  const test::GraphEager r_off = run_case(off, false);
  EXPECT_FALSE(has(r_off.module, "custom_call"));
  EXPECT_TRUE(has(r_off.module, "stablehlo.while"));
  expect_matches(off, r_off);
}

// Attention blocks inside autograd::scan_blocks' loop: the calls sit in the loop's body (forward)
// and in the backward's loop, with the block's own weights, which they read as rows of the stacks;
// the forward's calls whose results the backward takes write them as rows of the loop's stacks.
TEST(GraphCustomKernels, SplashInsideTheLoopOverLayers) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  const int64_t B = 2, S = 40, H = 2, D = 4, n = 3;
  std::vector<Tensor> inputs{test::rand_f32({B, S, H * D}, 10)};
  for (int64_t i = 0; i < n; ++i) {
    inputs.push_back(test::rand_f32({H * D, H * D}, 11 + static_cast<uint64_t>(i), -0.5, 0.5));
    inputs.push_back(test::rand_f32({H * D, H * D}, 21 + static_cast<uint64_t>(i), -0.5, 0.5));
  }
  inputs.push_back(packed_ids(B, S, 5));
  auto blocks = [&](const std::vector<Tensor>& x) {
    const BlockMask mask = BlockMask::build(Mask::causal() & Mask::document(x.back()), B, S, 16, 16);
    std::vector<std::vector<Tensor>> params;
    for (int64_t i = 0; i < n; ++i)
      params.push_back({x[static_cast<size_t>(1 + 2 * i)], x[static_cast<size_t>(2 + 2 * i)]});
    Tensor h = autograd::scan_blocks(x[0], params, [params, mask, B, S, H, D](size_t i, const Tensor& v) {
      const Tensor q = ops::linear(v, params[i][0], Tensor()).reshape({B, S, H, D});
      const Tensor k = ops::linear(v, params[i][1], Tensor()).reshape({B, S, H, D});
      return ops::add(
          v, attention::splash_attention(q, k, v.reshape({B, S, H, D}), mask).reshape({B, S, H * D}));
    });
    return std::vector<Tensor>{h};
  };
  // Keeping products or all, the backward takes the forward call's output and statistics from the
  // loop instead of calling it again.
  for (const auto& [saves, name] : test::kAllScanSaves) {
    SCOPED_TRACE(name);
    const test::GraphEager r = test::run_eager_and_graph(blocks, inputs, true, /*scan_layers=*/true, true, saves);
    EXPECT_TRUE(has(r.module, "stablehlo.while"));
    EXPECT_TRUE(has(r.module, "titan_splash_bwd"));
    EXPECT_EQ(test::occurrences(r.module, "titan_splash_fwd"), saves == graph::ScanSaves::inputs ? 2u : 1u);
    EXPECT_TRUE(has(r.module, "titan_row_")) << "the calls read the layer's weights in place";
    EXPECT_EQ(has(r.module, "titan_into_"), saves != graph::ScanSaves::inputs)
        << "kept calls write their results straight into the loop's stacks";
    EXPECT_TRUE(has(r.module, "titan_unfilled")) << "the loops' stacks start unfilled, not zeroed";
    ASSERT_EQ(r.graph.size(), r.eager.size());
    for (size_t i = 0; i < r.eager.size(); ++i)
      EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 1e-5) << "result " << i;
  }
}

// RMSNorm's fused kernels as calls (forward and backward), rows that are not a multiple of the
// kernels' blocks, against eager.
TEST(GraphCustomKernels, RmsNormForwardAndBackward) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  const std::vector<Tensor> inputs{test::rand_f32({3, 5, 37}, 40), test::rand_f32({37}, 41)};
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::rms_norm(in[0], in[1], 1e-5)};
  };
  const test::GraphEager r = test::run_eager_and_graph(fn, inputs, true, false, true);
  EXPECT_TRUE(has(r.module, "titan_rms_norm_fwd"));
  EXPECT_TRUE(has(r.module, "titan_rms_norm_bwd"));
  expect_close(r, {"y", "dx", "dweight"}, 1e-6);
}

// LayerNorm's fused kernels as calls, forward and backward, with and without its weight and bias
// (FLUX's norms have neither), against eager.
TEST(GraphCustomKernels, LayerNormForwardAndBackward) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  const Tensor x = test::rand_f32({3, 5, 37}, 45), w = test::rand_f32({37}, 46), b = test::rand_f32({37}, 47);
  struct Params {
    const char* name;
    bool weight, bias;
    std::vector<const char*> results;
  };
  for (const Params& c :
       {Params{"none", false, false, {"y", "dx"}}, Params{"weight", true, false, {"y", "dx", "dweight"}},
        Params{"bias", false, true, {"y", "dx", "dbias"}}, Params{"both", true, true, {"y", "dx", "dweight", "dbias"}}}) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> inputs{x};
    if (c.weight) inputs.push_back(w);
    if (c.bias) inputs.push_back(b);
    auto fn = [c](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::layer_norm(in[0], c.weight ? in[1] : Tensor(), c.bias ? in.back() : Tensor(),
                                                 1e-5)};
    };
    const test::GraphEager r = test::run_eager_and_graph(fn, inputs, true, false, true);
    EXPECT_TRUE(has(r.module, "titan_layer_norm_fwd"));
    EXPECT_TRUE(has(r.module, "titan_layer_norm_bwd"));
    ASSERT_EQ(r.eager.size(), c.results.size());
    expect_close(r, c.results, 1e-6);
  }
}

// A linear layer's three products through titan's GEMM as calls (y; dx and dw in one), leading dims folded and
// a bias added, in float32 and under bf16 autocast (both sides multiply the same bf16 operands),
// against eager.
TEST(GraphCustomKernels, LinearForwardAndBackward) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  const std::vector<Tensor> inputs{test::rand_f32({3, 5, 37}, 50), test::rand_f32({19, 37}, 51),
                                   test::rand_f32({19}, 52)};
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1], in[2])}; };
  for (bool bf16 : {false, true}) {
    if (bf16 && kernels::cpu::onednn_bf16_isa().empty()) continue;  // the eager side's kernels
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "f32");
    const AutocastGuard autocast(bf16 ? kBF16 : kF32);
    const test::GraphEager r = test::run_eager_and_graph(fn, inputs, true, false, true);
    EXPECT_EQ(test::occurrences(r.module, "titan_gemm\""), 2u) << "y, then dx and dw side by side in one call";
    EXPECT_FALSE(has(r.module, "stablehlo.dot_general"));
    expect_close(r, {"y", "dx", "dw", "dbias"}, 1e-5);
  }
}

// SwiGLU's fused kernels as calls, forward and backward, against eager.
TEST(GraphCustomKernels, SwigluForwardAndBackward) {
  SKIP_WITHOUT_CUSTOM_KERNELS();
  const std::vector<Tensor> inputs{test::rand_f32({3, 5, 37}, 60), test::rand_f32({3, 5, 37}, 61)};
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::swiglu(in[0], in[1])}; };
  const test::GraphEager r = test::run_eager_and_graph(fn, inputs, true, false, true);
  EXPECT_TRUE(has(r.module, "titan_swiglu_fwd"));
  EXPECT_TRUE(has(r.module, "titan_swiglu_bwd"));
  expect_close(r, {"out", "d_gate", "d_up"}, 1e-6);
}

// The decision itself: on for this CPU plugin, with the kernels named; off when not wanted.
TEST(GraphCustomKernels, DecisionNamesTheKernelsOrWhyNone) {
  const train::CustomKernels off = train::enable_custom_kernels(test::test_runner(), false);
  EXPECT_FALSE(off.on);
  EXPECT_TRUE(has(off.note, "compile.custom_kernels = false"));
  const train::CustomKernels on = train::enable_custom_kernels(test::test_runner(), true);
  const bool cpu = test::test_runner().client().platform_name() == "cpu";
  const bool ffi = graph::pjrt::ffi::unsupported_reason(test::test_runner().client().plugin()).empty();
  EXPECT_EQ(on.on, cpu && ffi) << on.note;
  EXPECT_TRUE(has(on.note, on.on ? "splash attention" : "XLA's lowerings")) << on.note;
}

}  // namespace
}  // namespace titan

namespace titan::train {
namespace {

const std::vector<std::string> kGraph = {"--compile.enable=true"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-12);
}

struct Logged {
  TrainResult result;
  std::string log;
};
Logged run_logged(const JobConfig& cfg) {
  std::ostringstream log;
  Trainer t(cfg, log);
  TrainResult r = t.train();
  return {std::move(r), log.str()};
}

// As GraphTrain.MatchesEagerOverTwentySteps, with titan's kernels on (the default) and off: both
// stay within 1e-5 of eager's losses over 20 steps at a learning rate that moves the weights (on
// this machine 7.5e-7 on, 6.6e-7 off; attention's scale off by 0.1% in the kernel's call gives
// 6.7e-5), and the start-up log says which ran.
TEST(GraphTrainCustomKernels, MatchesEagerOverTwentyStepsOnAndOff) {
  const std::vector<std::string> o = {"--training.steps=20", "--optimizer.lr=3e-3"};
  const TrainResult eager = run(small_config(o));
  for (bool on : {true, false}) {
    SCOPED_TRACE(on ? "custom kernels on" : "custom kernels off");
    std::vector<std::string> g = with(o, kGraph);
    if (!on) g.push_back("--compile.custom_kernels=false");
    const Logged graph = run_logged(small_config(g));
    const bool expect_on = on && enable_custom_kernels(test::test_runner(), true).on;
    EXPECT_EQ(has(graph.log, "custom calls: splash attention forward and backward"), expect_on) << graph.log;
    if (!on) {
      EXPECT_TRUE(has(graph.log, "custom_kernels = false")) << graph.log;
    }
    ASSERT_EQ(graph.result.losses.size(), 20u);
    double worst = 0;
    for (size_t i = 0; i < 20; ++i) {
      worst = std::max(worst, relative(graph.result.losses[i], eager.losses[i]));
      EXPECT_LE(relative(graph.result.losses[i], eager.losses[i]), 1e-5) << "step " << i + 1;
      EXPECT_LE(relative(graph.result.grad_norms[i], eager.grad_norms[i]), 1e-3) << "step " << i + 1;
    }
    EXPECT_LT(graph.result.losses.back(), 0.8 * graph.result.losses.front());
    std::cout << (on ? "kernels on" : "kernels off") << ": largest relative loss difference to eager "
              << worst << "\n";
  }
}

// Packed documents with the kernels on: the ids reach the handler as an operand.
TEST(GraphTrainCustomKernels, DocumentMaskingMatchesEager) {
  const std::vector<std::string> o = {"--attention.document_masking=true"};
  const TrainResult eager = run(small_config(o));
  const Logged graph = run_logged(small_config(with(o, kGraph)));
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_LE(relative(graph.result.losses[i], eager.losses[i]), 1e-5) << i;
}

TEST(GraphTrainCustomKernels, KeyIsRefusedOutsideGraphMode) {
  EXPECT_TITAN_ERROR(small_config({"--compile.custom_kernels=false"}), "compile.custom_kernels",
                     "only in graph mode");
}

}  // namespace
}  // namespace titan::train
