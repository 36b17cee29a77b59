// Attention in a program for XLA's CUDA plugin: the choice of form per platform, case by case
// (attention/attention_choice.h), and the text of cuDNN's flash-attention custom calls titan writes
// (attention/cudnn_attention.h) for causal, sliding-window, grouped-query, unmasked and
// packed-document attention, forward and backward, against the calls as JAX writes them. No GPU
// runs here: the CPU plugin parses the program and stops only at the targets it does not have;
// scripts/gpu_check.sh runs these calls on a GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/attention_cases.h"
#include "support/graph_harness.h"
#include "support/paths.h"
#include "support/tiny_llama3.h"
#include "support/test_util.h"
#include "titan/attention/attention_choice.h"
#include "titan/attention/splash.h"
#include "titan/core/autocast.h"
#include "titan/core/error.h"
#include "titan/graph/lazy.h"
#include "titan/models/llama3/model.h"
#include "titan/optim/adamw.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/graph_mode/captured_function.h"

namespace titan {
namespace {

using attention::AttentionForm;
using attention::BlockMask;
using attention::Mask;
using Platform = graph::Program::Platform;

struct Case {
  int64_t B = 2, S = 128, Hq = 8, Hkv = 2, D = 64;
};

// The attention of `c` over `rule`, forward and backward, captured for `platform` with q, k and v
// in f32 and the products in bf16 (training under bf16 autocast): the module and its notes.
struct Captured {
  std::string module;
  std::vector<std::string> notes;
};
// `ids` (packed documents' ids, for a rule that reads them) are an input of the program too.
using Rule = std::function<Mask(const Tensor& ids)>;
Captured capture(const Case& c, const Rule& rule, Platform platform, DType autocast = kBF16,
                 const attention::SplashOptions& opts = {}, bool cudnn = true, const Tensor& ids = {},
                 int64_t max_documents = 0) {
  graph::Program program;
  program.set_platform(platform);
  program.set_cudnn_attention(cudnn);
  program.set_max_documents(max_documents);
  std::vector<Tensor> in{test::rand_f32({c.B, c.S, c.Hq, c.D}, 1), test::rand_f32({c.B, c.S, c.Hkv, c.D}, 2),
                         test::rand_f32({c.B, c.S, c.Hkv, c.D}, 3)};
  for (Tensor& t : in) t.requires_grad_();
  if (ids.defined()) in.push_back(ids);
  const train::FunctionCapture captured = train::capture_function(
      program,
      [&] {
        const AutocastGuard guard(autocast);
        const BlockMask mask = BlockMask::build(rule(ids.defined() ? in[3] : Tensor()), c.B, c.S);
        return std::vector<Tensor>{attention::splash_attention(in[0], in[1], in[2], mask, opts)};
      },
      in, {test::rand_f32({c.B, c.S, c.Hq, c.D}, 4)});
  return {captured.module, program.notes()};
}
Rule fixed(const Mask& m) {
  return [m](const Tensor&) { return m; };
}

// A custom call as the golden files hold it: its target, then its attributes and types, with the
// backend_config's JSON taken out (it is compared as JSON) and MLIR's two spellings of a
// one-element layout made one.
struct Call {
  std::string target;
  std::string rest;
  nlohmann::json config;
};
Call parse_call(const std::string& target, const std::string& text) {
  const std::string open = "backend_config = \"";
  const size_t start = text.find(open) + open.size();
  size_t end = start;
  while (text[end] != '"') {
    if (text[end] != '\\') {
      ++end;
      continue;
    }
    end += text[end + 1] == '"' || text[end + 1] == '\\' ? 2 : 3;  // \" or \\, else \22
  }
  // JAX escapes a quote as \22, titan as \".
  const std::string json =
      std::regex_replace(std::regex_replace(text.substr(start, end - start), std::regex(R"(\\22)"), "\""),
                         std::regex(R"(\\")"), "\"");
  std::string rest = text.substr(0, start) + "JSON" + text.substr(end);
  rest = std::regex_replace(rest, std::regex(R"(dense<\[(\d+)\]> : tensor<1xindex>)"), "dense<$1> : tensor<1xindex>");
  // The target is compared apart (MLIR's pretty form, JAX's, writes it before the operands).
  rest = std::regex_replace(rest, std::regex(R"re(call_target_name = "[^"]*", )re"), "");
  nlohmann::json config = nlohmann::json::parse(json);
  // Newer JAX writes the empty list of queues to wait on; both mean none.
  config.erase("wait_on_operation_queues");
  return {target, rest, config};
}

// The cuDNN calls of a captured module, in order.
std::vector<Call> cudnn_calls(const std::string& module) {
  std::vector<Call> out;
  std::istringstream lines(module);
  const std::regex target(R"re(call_target_name = "(__cudnn\$\w+)")re");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, target)) continue;
    out.push_back(parse_call(m[1], line.substr(line.find(") {") + 2)));
  }
  return out;
}

// The golden file's calls (scripts/cudnn_attention_golden.py wrote them from JAX's lowering).
std::vector<Call> golden_calls(const std::string& name) {
  std::ifstream in(std::string(test::paths::source_dir()) + "/tests/fixtures/cudnn_attention/" + name + ".txt");
  TITAN_CHECK(in.good(), "no golden file ", name, ".txt; run scripts/cudnn_attention_golden.py");
  std::vector<Call> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    out.push_back(parse_call(line.substr(0, space), line.substr(space + 1)));
  }
  return out;
}

// titan's forward and backward calls for the case are JAX's: the same operands, results, layouts
// and types, and the same backend_config (as JSON).
void expect_as_jax_writes(const std::string& golden, const Captured& c) {
  SCOPED_TRACE(golden);
  const std::vector<Call> want = golden_calls(golden), got = cudnn_calls(c.module);
  ASSERT_EQ(got.size(), want.size()) << c.module;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].target, want[i].target);
    EXPECT_EQ(got[i].rest, want[i].rest);
    EXPECT_EQ(got[i].config, want[i].config) << "titan: " << got[i].config.dump() << "\njax: " << want[i].config.dump();
  }
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("cuDNN flash attention"), std::string::npos) << c.notes[0];
}

// q [B, T, 8, 64], k and v [B, T, 2, 64] (grouped-query heads: no repeat of k and v), causal.
TEST(CudnnAttention, CausalGroupedQueryAsJaxWritesIt) {
  expect_as_jax_writes("causal_gqa", capture({}, fixed(Mask::causal()), Platform::cuda));
}

// titan's window q - 15 <= k <= q is cuDNN's band of 16 keys ending at the diagonal.
TEST(CudnnAttention, SlidingWindowAsJaxWritesIt) {
  expect_as_jax_writes("sliding_window", capture({.B = 1, .S = 96, .Hq = 4, .Hkv = 4, .D = 32},
                                                 fixed(Mask::sliding_window(15)), Platform::cuda));
}

// A window as wide as the sequence both ways (FLUX's) is no mask; the scale travels as given.
TEST(CudnnAttention, NoMaskWithItsScaleAsJaxWritesIt) {
  expect_as_jax_writes("no_mask", capture({.B = 1, .S = 96, .Hq = 4, .Hkv = 4, .D = 32},
                                          fixed(Mask::sliding_window(96, 96)), Platform::cuda, kBF16, {.scale = 0.3}));
  // A window reaching the whole sequence back is causal alone.
  const std::vector<Call> causal = cudnn_calls(
      capture({.B = 1, .S = 96, .Hq = 4, .Hkv = 4, .D = 32}, fixed(Mask::sliding_window(95)), Platform::cuda).module);
  ASSERT_EQ(causal.size(), 2u);
  EXPECT_EQ(causal[0].config.at("cudnn_fmha_backend_config").at("mask_type"), "CAUSAL");
  EXPECT_EQ(causal[0].config.at("cudnn_fmha_backend_config").at("sliding_window_length"), 0);
}

// Packed documents, four a row at most: the calls take the documents' lengths and offsets after
// q, k and v (and out), the statistics hold a row per document slot, max_seg_per_batch is 4.
TEST(CudnnAttention, PackedDocumentsAsJaxWritesThem) {
  const Rule documents = [](const Tensor& ids) { return Mask::document(ids); };
  const Case c{.B = 2, .S = 128, .Hq = 4, .Hkv = 4, .D = 64};
  const Tensor ids = test::packed_ids(c.B, c.S, 3);
  const Captured packed = capture(c, documents, Platform::cuda, kBF16, {}, true, ids, /*max_documents=*/4);
  expect_as_jax_writes("documents", packed);
  EXPECT_NE(packed.notes[0].find("up to 4 packed documents a row"), std::string::npos) << packed.notes[0];
  // A bound of one document a row is causal attention alone.
  const std::vector<Call> one = cudnn_calls(capture(c, documents, Platform::cuda, kBF16, {}, true, ids, 1).module);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].config.at("cudnn_fmha_backend_config").at("max_seg_per_batch"), 1);
  EXPECT_EQ(one[0].config.at("cudnn_fmha_backend_config").at("mask_type"), "CAUSAL");
}

// cuDNN's ragged layout, computed inside the program from the loader's ids: rows of 1, 3 and 4
// documents (the last numbered from 5), four a row at most, grouped-query heads. Lengths left
// packed over the batch, 0 after the last; offsets where each document starts in elements of the
// whole batch (a q token 8 x 16 of them, a k or v token 2 x 16), the batch's end after the last.
TEST(CudnnAttention, SegmentsAreTheDocumentsLengthsAndOffsetsLeftPacked) {
  const int64_t B = 3, T = 10, M = 4, Hq = 8, Hkv = 2, D = 16;
  std::vector<Tensor> in{Tensor::from_vector<int32_t>({0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                                       0, 0, 0, 1, 1, 2, 2, 2, 2, 2,  //
                                                       5, 6, 6, 7, 7, 7, 8, 8, 8, 8},
                                                      {B, T})};
  train::CapturedFunction f(
      test::test_runner(),
      [&] {
        const attention::CudnnSegments s = attention::cudnn_segments(graph::value_of(in[0], "test"), M, Hq, Hkv, D);
        return std::vector<Tensor>{graph::tensor_of(s.q_seqlen), graph::tensor_of(s.kv_seqlen),
                                   graph::tensor_of(s.q_offsets), graph::tensor_of(s.kv_offsets)};
      },
      in, {}, {});
  const std::vector<Tensor> out = f.run_to_host();
  ASSERT_EQ(out.size(), 4u);
  const std::vector<int32_t> lengths{10, 3, 2, 5, 1, 2, 3, 4, 0, 0, 0, 0};
  const std::vector<int64_t> starts{0, 10, 13, 15, 20, 21, 23, 26, 30, 30, 30, 30, 30, 30, 30};
  auto scaled = [&](int64_t stride) {
    std::vector<int32_t> v;
    for (int64_t x : starts) v.push_back(static_cast<int32_t>(x * stride));
    return v;
  };
  EXPECT_EQ(out[0].sizes(), Shape({B, M}));
  EXPECT_EQ(out[0].to_vector<int32_t>(), lengths);
  EXPECT_EQ(out[1].to_vector<int32_t>(), lengths);
  EXPECT_EQ(out[2].sizes(), Shape({B, M + 1}));
  EXPECT_EQ(out[2].to_vector<int32_t>(), scaled(Hq * D));
  EXPECT_EQ(out[3].to_vector<int32_t>(), scaled(Hkv * D));
}

// cuDNN reads the offsets as i32: a batch whose elements pass that keeps XLA's lowering, and the
// segments refuse it.
TEST(CudnnAttention, OffsetsPastI32AreRefused) {
  EXPECT_TRUE(attention::cudnn_offsets_fit(2, 8192, 32, 128));
  EXPECT_FALSE(attention::cudnn_offsets_fit(64, 8192, 32, 128));  // 2^31 elements
  graph::Program program;
  const graph::CaptureScope scope(program);
  const graph::Value ids = program.parameter({64, 8192}, kI32, "ids", graph::InputKind::batch);
  EXPECT_TITAN_ERROR(attention::cudnn_segments(ids, 4, 32, 8, 128), "pass i32's offsets");
}

// What GraphStep bounds the documents by: the most a row holds where the ids are numbered as the
// loader numbers them, none for other ids.
TEST(CudnnAttention, DocumentsPerRowCountsTheLoadersIdsAndRefusesOthers) {
  using attention::packed_documents_per_row;
  EXPECT_EQ(packed_documents_per_row(Tensor::from_vector<int64_t>({0, 0, 1, 2, 5, 5, 5, 6}, {2, 4})), 3);
  EXPECT_EQ(packed_documents_per_row(Tensor::from_vector<int32_t>({4, 4, 4, 4}, {1, 4})), 1);
  EXPECT_EQ(packed_documents_per_row(test::packed_ids(2, 96, 1)).value_or(0) > 2, true);
  EXPECT_EQ(packed_documents_per_row(Tensor::from_vector<int64_t>({0, 1, 0, 1}, {1, 4})), std::nullopt);
  EXPECT_EQ(packed_documents_per_row(Tensor::from_vector<int64_t>({0, 0, 2, 2}, {1, 4})), std::nullopt);
  EXPECT_TITAN_ERROR(packed_documents_per_row(Tensor::zeros({4}, {.dtype = kI64})), "document ids [batch, seq]");
}

// Cases cuDNN cannot take keep XLA's lowering on a CUDA program: no cuDNN call in the text, and
// the note says what the layer got and why.
TEST(CudnnAttention, CasesCudnnCannotTakeKeepXlasLoweringAndSayWhy) {
  const Case small{.B = 1, .S = 96, .Hq = 4, .Hkv = 2, .D = 32};
  const auto check = [&](const Captured& c, const std::string& form, const std::string& why) {
    EXPECT_EQ(c.module.find("__cudnn$"), std::string::npos);
    ASSERT_EQ(c.notes.size(), 1u);
    EXPECT_NE(c.notes[0].find(form), std::string::npos) << c.notes[0];
    EXPECT_NE(c.notes[0].find(why), std::string::npos) << c.notes[0];
  };
  const Rule causal = fixed(Mask::causal());
  check(capture(small, causal, Platform::cuda, kF32), "XLA's dense masked softmax", "takes bf16 or f16");
  check(capture(small, causal, Platform::cuda, kBF16, {.softcap = 30.0}), "dense", "soft-capping");
  check(capture(small, causal, Platform::cuda, kBF16, {}, /*cudnn=*/false), "dense", "compile.cudnn_attention = false");
  check(capture(small, [](const Tensor& ids) { return Mask::document(ids); }, Platform::cuda, kBF16, {}, true,
                test::packed_ids(1, 96, 3)),
        "dense", "packed documents");
  check(capture(small, fixed(Mask::chunked_causal(32)), Platform::cuda), "dense", "chunked");
  check(capture(small, fixed(Mask::sliding_window(8, 8)), Platform::cuda), "dense", "past the query");
  check(capture({.B = 1, .S = 96, .Hq = 2, .Hkv = 2, .D = 36}, causal, Platform::cuda), "dense", "multiples of 8");
  check(capture(small, fixed(Mask::causal() | Mask::sliding_window(4, 4)), Platform::cuda), "dense",
        "not causal plus a window");
}

TEST(AttentionChoice, FormPerPlatform) {
  const BlockMask causal = BlockMask::build(Mask::causal(), 2, 512);
  const attention::Scores scores{.scale = 0.125};
  const auto form = [&](Platform platform, bool custom_kernels, const BlockMask& mask, DType dtype, bool bf16_products,
                        int64_t partitions = 1) {
    graph::Program p;
    p.set_platform(platform);
    p.set_custom_kernels(custom_kernels);
    p.set_partitions(partitions);
    return attention::choose_attention(p, mask, scores, dtype, bf16_products, 2, 8, 2, 64).form;
  };
  // A CPU plugin: titan's kernels where it runs them, else XLA's tiles beyond kDenseMaxSeq.
  EXPECT_EQ(form(Platform::cpu, true, causal, kF32, true), AttentionForm::titan_kernels);
  EXPECT_EQ(form(Platform::cpu, false, causal, kF32, true), AttentionForm::tiled);
  EXPECT_EQ(form(Platform::cpu, false, BlockMask::build(Mask::causal(), 2, 64), kF32, false), AttentionForm::dense);
  // CUDA: cuDNN in bf16 products or bf16, XLA's dense form where cuDNN cannot take the case and the
  // scores fit (2 x 8 x 512^2 f32 is 16 MiB), tiles when they do not (2 x 8 x 8192^2 f32 is 4 GiB).
  EXPECT_EQ(form(Platform::cuda, false, causal, kF32, true), AttentionForm::cudnn);
  EXPECT_EQ(form(Platform::cuda, false, causal, kBF16, false), AttentionForm::cudnn);
  EXPECT_EQ(form(Platform::cuda, false, causal, kF32, false), AttentionForm::dense);
  EXPECT_EQ(form(Platform::cuda, false, BlockMask::build(Mask::causal(), 2, 8192), kF32, false), AttentionForm::tiled);
  // Over several devices XLA's partitioner cannot split the call.
  EXPECT_EQ(form(Platform::cuda, false, causal, kF32, true, 2), AttentionForm::dense);
  // Other plugins (TPU's) fuse plain attention: XLA's forms, by the GPU's size rule.
  EXPECT_EQ(form(Platform::other, false, causal, kF32, true), AttentionForm::dense);
}

// The CPU plugin reads every op of a CUDA program, cuDNN's calls included, and stops only where it
// has no implementation of their targets: the text is well formed. (On a CUDA plugin, the next test
// runs the calls instead.)
TEST(CudnnAttention, TheCpuPluginParsesTheCallsAndLacksOnlyTheirTargets) {
  if (test::test_runner().platform() != Platform::cpu) GTEST_SKIP() << "the graph tests run on a CUDA plugin";
  const Captured c = capture({.B = 1, .S = 64, .Hq = 2, .Hkv = 1, .D = 16}, fixed(Mask::causal()), Platform::cuda);
  try {
    test::test_runner().compile(c.module);
    FAIL() << "the CPU plugin compiled cuDNN's custom calls";
  } catch (const Error& e) {
    const std::string what = e.what();
    // "No registered implementation for untyped custom call to __cudnn$fmhaSoftmax for Host": past
    // the parser and the conversion to HLO, at the emission of the calls.
    EXPECT_NE(what.find("No registered implementation"), std::string::npos) << what;
    EXPECT_NE(what.find("__cudnn$fmhaSoftmax"), std::string::npos) << what;
  }
}

// A Llama step in the loop over layers on a CUDA program: cuDNN's forward is written once in the
// loop's body and its results kept for the backward (but its workspace, which holds nothing), or
// written again in the backward where the loop keeps only each block's input. The CPU plugin parses
// the whole step and stops only at cuDNN's targets.
TEST(CudnnAttention, TheLayerLoopKeepsOrRecomputesCudnnsForward) {
  models::llama3::ModelArgs args = test::tiny_llama3_args(16);
  args.dim = 64;  // heads of 16: a multiple of 8, as cuDNN takes
  args.n_layers = 3;
  models::llama3::Transformer model(args);
  Generator gen(5);
  model.init_weights(gen);
  const auto params = model.named_parameters();
  data::Batch batch{Tensor::zeros({2, 16}, {.dtype = kI64}), Tensor::zeros({2, 16}, {.dtype = kI64})};
  for (const bool documents : {false, true}) {
    // Packed documents: the calls take their lengths and offsets too.
    if (documents) batch.document_ids = test::packed_ids(2, 16, 4);
    for (const auto& [saves, name] : test::kAllScanSaves) {
      SCOPED_TRACE(std::string(name) + (documents ? ", packed documents" : ""));
      const AutocastGuard bf16(kBF16);
      const std::string text = train::capture_train_step(model, optim::AdamW(params), params, {batch},
                                                         {.scan_layers = true,
                                                          .scan_saves = saves,
                                                          .custom_kernels = false,
                                                          .platform = Platform::cuda,
                                                          .max_documents = documents ? 8 : 0})
                                   .text;
      const bool recomputed = saves == graph::ScanSaves::inputs;
      EXPECT_EQ(test::occurrences(text, "call_target_name = \"__cudnn$fmhaSoftmax\""), recomputed ? 2u : 1u);
      EXPECT_EQ(test::occurrences(text, "call_target_name = \"__cudnn$fmhaSoftmaxBackward\""), 1u);
      EXPECT_EQ(test::occurrences(text, "dense<> : tensor<0xui8>"), recomputed ? 0u : 1u);
      EXPECT_EQ(test::occurrences(text, "\\\"max_seg_per_batch\\\":8"), documents ? (recomputed ? 3u : 2u) : 0u);
      if (test::test_runner().platform() != Platform::cpu) continue;
      EXPECT_TITAN_ERROR(test::test_runner().compile(text), "No registered implementation",
                         "__cudnn$fmhaSoftmax");
    }
  }
}

// On a CUDA plugin (scripts/gpu_check.sh runs the graph tests there): cuDNN's flash attention,
// forward and backward, against titan's eager splash kernels in bf16 products on the host, for
// causal grouped-query heads, a sliding window, no mask and packed documents (cuDNN's ragged
// layout). bf16 outputs and gradients: 2e-2 of the largest value.
TEST(CudnnAttention, OnACudaPluginMatchesEagerSplash) {
  if (test::test_runner().platform() != Platform::cuda)
    GTEST_SKIP() << "needs TITAN_GRAPH_PLUGIN=cuda (scripts/gpu_check.sh); the text is checked above";
  const int64_t B = 2, S = 200, Hq = 8, Hkv = 2, D = 64;
  const Tensor ids = test::packed_ids(B, S, 9);
  const std::vector<std::pair<const char*, std::function<Mask(const std::vector<Tensor>&)>>> rules{
      {"causal", [](const std::vector<Tensor>&) { return Mask::causal(); }},
      {"window", [](const std::vector<Tensor>&) { return Mask::sliding_window(37); }},
      {"none", [](const std::vector<Tensor>&) { return Mask::sliding_window(200, 200); }},
      {"documents", [](const std::vector<Tensor>& x) { return Mask::document(x[3]); }}};
  for (const auto& [name, rule] : rules) {
    SCOPED_TRACE(name);
    const bool documents = std::string(name) == "documents";
    std::vector<Tensor> in{test::rand_f32({B, S, Hq, D}, 1), test::rand_f32({B, S, Hkv, D}, 2),
                           test::rand_f32({B, S, Hkv, D}, 3)};
    if (documents) in.push_back(ids);
    const test::GraphEager r = test::run_eager_and_graph(
        [&](const std::vector<Tensor>& x) {
          const AutocastGuard bf16(kBF16);
          return std::vector<Tensor>{attention::splash_attention(x[0], x[1], x[2], BlockMask::build(rule(x), B, S))};
        },
        in, true, false, false, graph::ScanSaves::all,
        documents ? *attention::packed_documents_per_row(ids) : 0);
    EXPECT_EQ(test::occurrences(r.module, "__cudnn$fmhaSoftmaxBackward"), 1u);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < r.eager.size(); ++i)
      EXPECT_LE(test::max_relative_error(r.graph[i], r.eager[i]), 2e-2) << names[i];
  }
}

}  // namespace
}  // namespace titan
