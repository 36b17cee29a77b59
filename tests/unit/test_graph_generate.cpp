// Generation in graph mode (rl/graph_decoder.h) against eager generation on the same weights: the
// logits of the prefill and of every decoding step, greedy and sampled tokens with the same seeds,
// Llama 3 (grouped-query attention) and Qwen 3 (QK-norm, tied embeddings; dense and MoE), with
// titan's kernels as custom calls and without; one compile per shape; and the ops the decoding
// step is made of (RoPE, the cache's write and attention at a position that is an input of the
// program) against their eager kernels.
#include <gtest/gtest.h>

#include <sstream>

#include "support/graph_harness.h"
#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "support/tiny_qwen3.h"
#include "titan/attention/decode.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/core/rng.h"
#include "titan/graph/lazy.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/llama3/model.h"
#include "titan/nn/moe/moe.h"
#include "titan/ops/rope.h"
#include "titan/ops/update_slice.h"
#include "titan/rl/graph_decoder.h"

namespace titan::rl {
namespace {

std::shared_ptr<models::llama3::Transformer> llama() {
  return test::generation_llama3(40);
}

std::shared_ptr<models::qwen3::Transformer> qwen3(bool moe) {
  models::qwen3::ModelArgs a = test::tiny_qwen3_args(moe);
  a.max_seq_len = 40;
  auto model = std::make_shared<models::qwen3::Transformer>(a);
  test::randomise(*model, 5);
  return model;
}

GraphDecoderOptions options(bool custom_kernels = true) {
  return {.runtime = test::test_runtime_options(), .custom_kernels = custom_kernels};
}

// Prefill, then `steps` tokens fed one at a time, through both decoders: every step's logits agree.
void expect_same_logits(models::CausalLM& model, Decoder& graph, const std::vector<int64_t>& prompt, int64_t steps,
                        double tol) {
  EagerDecoder eager(model);
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + steps;
  Tensor e = eager.prefill(prompt, max_len), g = graph.prefill(prompt, max_len);
  EXPECT_LE(test::max_relative_error(g, e), tol) << "prefill of " << prompt.size() << " tokens";
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t token = (7 * i + 3) % model.vocab_size();
    e = eager.decode(token);
    g = graph.decode(token);
    EXPECT_LE(test::max_relative_error(g, e), tol) << "decoding step " << i;
  }
}

TEST(GraphGenerate, LlamaLogitsMatchEagerAtEveryStep) {
  auto model = llama();
  for (bool custom : {true, false}) {
    SCOPED_TRACE(custom ? "custom kernels" : "XLA's lowerings");
    GraphDecoder graph(*model, options(custom));
    expect_same_logits(*model, graph, {1, 5, 9, 30, 2}, 12, 1e-5);
    // A second sequence reuses the programs and starts from a clean cache.
    expect_same_logits(*model, graph, {4, 4, 8, 1, 0}, 3, 1e-5);
  }
}

TEST(GraphGenerate, Qwen3DenseAndMoeLogitsMatchEager) {
  for (bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "MoE" : "dense");
    auto model = qwen3(moe);
    for (bool custom : {true, false}) {
      SCOPED_TRACE(custom ? "custom kernels" : "XLA's lowerings");
      GraphDecoder graph(*model, options(custom));
      expect_same_logits(*model, graph, {1, 2, 3, 10, 7, 7}, 9, 1e-5);
      // Graph mode's dispatcher (capacity, without custom kernels) served its captures only.
      for (const auto& [name, m] : model->named_modules())
        if (auto* layer = dynamic_cast<nn::moe::MoE*>(m)) {
          EXPECT_NE(dynamic_cast<nn::moe::LocalTokenDispatcher*>(layer->dispatcher.get()), nullptr) << name;
        }
    }
  }
}

TEST(GraphGenerate, GreedyAndSampledTokensMatchEager) {
  auto model = llama();
  GraphDecoder graph(*model, options());
  const std::vector<int64_t> prompt = {3, 14, 15, 9};
  for (const SamplingOptions& s : {SamplingOptions{.temperature = 0},
                                   SamplingOptions{.temperature = 1.5, .top_k = 0, .top_p = 1, .seed = 7},
                                   SamplingOptions{.temperature = 0.9, .top_k = 5, .top_p = 0.8, .seed = 8}}) {
    const GenerateOptions opts{.max_new_tokens = 20, .sampling = s};
    const GenerateResult e = generate(*model, prompt, opts), g = generate(graph, prompt, opts);
    EXPECT_EQ(g.tokens, e.tokens) << "temperature " << s.temperature << ", top_k " << s.top_k << ", top_p " << s.top_p;
    EXPECT_EQ(g.stop, e.stop);
  }
  // Up to the end of the context, as eager stops there.
  const GenerateOptions greedy{.max_new_tokens = 50, .sampling = {.temperature = 0}};
  const std::vector<int64_t> long_prompt(30, 6);
  const GenerateResult e = generate(*model, long_prompt, greedy), g = generate(graph, long_prompt, greedy);
  EXPECT_EQ(g.stop, StopReason::context_full);
  EXPECT_EQ(g.tokens, e.tokens);
}

TEST(GraphGenerate, CompilesPrefillOncePerPromptLengthAndDecodeOncePerCacheSize) {
  auto model = llama();
  std::ostringstream log;
  GraphDecoder graph(*model, options(), &log);
  const GenerateOptions opts{.max_new_tokens = 6, .sampling = {.temperature = 0}};
  generate(graph, std::vector<int64_t>{1, 2, 3}, opts);
  EXPECT_EQ(graph.compiles(), 2) << log.str();
  EXPECT_EQ(graph.cache_len(), 16);
  generate(graph, std::vector<int64_t>{4, 5, 6}, opts);
  EXPECT_EQ(graph.compiles(), 2) << "the same shapes compile nothing\n" << log.str();
  generate(graph, std::vector<int64_t>{4, 5, 6, 7}, opts);
  EXPECT_EQ(graph.compiles(), 3) << "a new prompt length compiles its prefill only\n" << log.str();
  generate(graph, std::vector<int64_t>{4, 5, 6, 7}, {.max_new_tokens = 20, .sampling = {.temperature = 0}});
  EXPECT_EQ(graph.cache_len(), 32);
  EXPECT_EQ(graph.compiles(), 5) << "a larger cache compiles both\n" << log.str();
  EXPECT_EQ(test::occurrences(log.str(), "captured the decoding step"), 2u) << log.str();
}

TEST(GraphGenerate, Bf16LogitsMatchEagerBf16) {
  // Eager bf16 products are oneDNN's, which need AMX-BF16 or AVX512-BF16; graph mode's are XLA's.
  if (kernels::cpu::onednn_bf16_isa().empty()) GTEST_SKIP() << "no bf16 instructions for eager's products here";
  const AutocastGuard bf16(kBF16);
  // A MoE model's router multiplies in f32 in both modes, its gate read as the f32 weight.
  auto moe = qwen3(true);
  GraphDecoder moe_graph(*moe, options());
  expect_same_logits(*moe, moe_graph, {1, 2, 3, 10, 7, 7}, 5, 1e-3);
  auto model = llama();
  GraphDecoder graph(*model, options());
  // Both multiply the same bf16 operands (graph mode reads the linear weights as a bf16 copy, eager
  // rounds them per product) with f32 sums in orders of their own: they measured 1e-4 apart, where
  // a lost rounding of the weights would be 4e-3 (bf16's half ulp) away.
  expect_same_logits(*model, graph, {1, 5, 9, 30, 2}, 6, 1e-3);
  EXPECT_EQ(graph.compiles(), 2);
}

TEST(GraphGenerate, BadInputsAreClearErrors) {
  auto model = llama();
  GraphDecoder graph(*model, options());
  EXPECT_TITAN_ERROR(graph.decode(1), "no sequence was started");
  EXPECT_TITAN_ERROR(graph.prefill(std::vector<int64_t>{1, 2}, 41), "context 40");
  EXPECT_TITAN_ERROR(graph.prefill(std::vector<int64_t>{1, 37}, 3), "prompt token 37", "vocabulary of 37");
  graph.prefill(std::vector<int64_t>{1, 2}, 3);
  EXPECT_TITAN_ERROR(graph.decode(37), "token 37", "vocabulary of 37");
  for (int i = 0; i < 14; ++i) graph.decode(1);
  EXPECT_TITAN_ERROR(graph.decode(1), "past the cache's 16 positions");
}

// ---- the decoding step's ops at a position that is an input of the program ----------------------------

TEST(GraphGenerate, RopeAtAProgramPositionMatchesTheKernel) {
  const ops::RopeTable table = ops::RopeTable::build(8, 20, 10000.0);
  const Tensor x = test::rand_f32({2, 3, 2, 8}, 1);
  for (int64_t start : {0, 5, 17})
    for (ops::RopeLayout layout : {ops::RopeLayout::rotate_half, ops::RopeLayout::interleaved}) {
      const test::GraphEager r = test::run_eager_and_graph(
          [&](const std::vector<Tensor>& v) { return std::vector<Tensor>{ops::rope(v[0], table, layout, v[1])}; },
          {x, Tensor::scalar<int64_t>(start)}, false);
      EXPECT_TRUE(test::tensors_close(r.graph[0], r.eager[0], 1e-6, "rope at " + std::to_string(start)));
      EXPECT_TRUE(test::tensors_close(r.eager[0], ops::rope(x, table, layout, start), 0, "the host start"));
      EXPECT_EQ(test::occurrences(r.module, "dynamic_slice"), 2u) << r.module;
    }
}

TEST(GraphGenerate, UpdateSliceAtAProgramPositionMatchesTheHost) {
  const Tensor dst = test::rand_f32({2, 9, 3}, 2), src = test::rand_f32({2, 2, 3}, 3);
  for (int64_t start : {0, 4, 7}) {
    const test::GraphEager r = test::run_eager_and_graph(
        [](const std::vector<Tensor>& v) { return std::vector<Tensor>{ops::update_slice(v[0], v[1], 1, v[2])}; },
        {dst, src, Tensor::scalar<int64_t>(start)}, false);
    EXPECT_TRUE(test::tensors_close(r.graph[0], r.eager[0], 0, "update_slice at " + std::to_string(start)));
    EXPECT_TRUE(test::tensors_close(r.eager[0].narrow(1, start, 2), src, 0, "the slice written"));
    EXPECT_TRUE(test::tensors_close(r.eager[0].narrow(1, 0, start), dst.narrow(1, 0, start), 0, "before it"));
  }
  EXPECT_TITAN_ERROR(ops::update_slice(dst, src, 1, Tensor::scalar<int64_t>(8)), "runs outside dst");
  EXPECT_TITAN_ERROR(ops::update_slice(dst, test::rand_f32({2, 2, 4}, 3), 1, Tensor::scalar<int64_t>(0)),
                     "does not fit dst");
}

TEST(GraphGenerate, DecodeAttentionAtAProgramPositionMatchesTheKernel) {
  // The cache's positions past the queries hold values that must take no part.
  const Tensor k = test::rand_f32({2, 11, 2, 4}, 4, -5, 5), v = test::rand_f32({2, 11, 2, 4}, 5, -5, 5);
  for (bool custom : {false, true})
    for (int64_t sq : {1, 3})
      for (int64_t start : {int64_t{0}, int64_t{4}, 11 - sq}) {
        const Tensor q = test::rand_f32({2, sq, 6, 4}, 6);
        const test::GraphEager r = test::run_eager_and_graph(
            [](const std::vector<Tensor>& x) {
              return std::vector<Tensor>{attention::decode_attention(x[0], x[1], x[2], x[3])};
            },
            {q, k, v, Tensor::scalar<int64_t>(start)}, false, false, custom);
        const std::string at = std::to_string(sq) + " queries at " + std::to_string(start) +
                                (custom ? ", titan's kernel as a custom call" : ", XLA's lowering");
        EXPECT_TRUE(test::tensors_close(r.graph[0], r.eager[0], custom ? 0 : 1e-5, at));
        EXPECT_EQ(test::occurrences(r.module, "titan_decode_attention"), custom ? 1u : 0u) << at;
        const Tensor direct =
            attention::decode_attention(q, k.narrow(1, 0, start + sq), v.narrow(1, 0, start + sq));
        EXPECT_TRUE(test::tensors_close(r.eager[0], direct, 0, at + ": the host start cuts the keys"));
      }
  EXPECT_TITAN_ERROR(attention::decode_attention(test::rand_f32({2, 2, 6, 4}, 6), k, v, Tensor::scalar<int64_t>(10)),
                     "at position 10 need keys up to 12");
}

// With a window, a cap and a scale: both graph forms match the host kernel, and the custom call
// carries the options as attributes.
TEST(GraphGenerate, DecodeAttentionWithWindowCapAndScaleMatchesTheKernel) {
  const Tensor k = test::rand_f32({2, 30, 2, 4}, 4, -3, 3), v = test::rand_f32({2, 30, 2, 4}, 5, -3, 3);
  const attention::DecodeOptions opts{.scale = 0.7, .softcap = 1.5, .window_left = 6};
  for (bool custom : {false, true})
    for (int64_t sq : {1, 3})
      for (int64_t start : {int64_t{0}, int64_t{4}, 30 - sq}) {
        const Tensor q = test::rand_f32({2, sq, 6, 4}, 6, -3, 3);
        const test::GraphEager r = test::run_eager_and_graph(
            [&opts](const std::vector<Tensor>& x) {
              return std::vector<Tensor>{attention::decode_attention(x[0], x[1], x[2], x[3], opts)};
            },
            {q, k, v, Tensor::scalar<int64_t>(start)}, false, false, custom);
        const std::string at = std::to_string(sq) + " queries at " + std::to_string(start) +
                               (custom ? ", titan's kernel as a custom call" : ", XLA's lowering");
        EXPECT_TRUE(test::tensors_close(r.graph[0], r.eager[0], custom ? 0 : 1e-5, at));
        EXPECT_EQ(test::occurrences(r.module, "softcap"), custom ? 1u : 0u) << at;
        // A lone query at position 0 sees only itself, whatever the options.
        const Tensor plain = attention::decode_attention(q, k, v, Tensor::scalar<int64_t>(start));
        if (start > 0) {
          EXPECT_GT(test::max_relative_error(r.eager[0], plain), 1e-2)
              << at << ": the options changed nothing";
        }
      }
}

TEST(GraphGenerate, APlacedCacheKeepsItsPositionToTheProgram) {
  models::KVCache host(1, 8);
  EXPECT_TITAN_ERROR(host.place_at(Tensor::scalar<int64_t>(3)), "0-d i64 value of the program");
  EXPECT_EQ(host.position().item(), 0);
  EXPECT_TRUE(host.starts_sequence());
  EXPECT_EQ(host.reach(3), 3);

  // Placed at a program's value: the host knows no length, the forward reaches the whole cache,
  // append returns the whole buffers, and the cache serves that one forward.
  graph::Program program;
  const graph::CaptureScope scope(program);
  models::KVCache placed(1, 8, [&](int64_t, const char* which, const Shape& shape, DType dtype) {
    return graph::tensor_of(program.parameter(shape, dtype, which, graph::InputKind::state));
  });
  placed.place_at(graph::tensor_of(program.parameter({}, kI64, "position", graph::InputKind::batch)));
  EXPECT_FALSE(placed.starts_sequence());
  EXPECT_EQ(placed.reach(1), 8);
  EXPECT_TITAN_ERROR(placed.length(), "only that program knows");
  const Tensor k = graph::tensor_of(program.parameter({1, 1, 2, 4}, kF32, "k", graph::InputKind::batch));
  const auto [keys, values] = placed.append(0, k, k);
  EXPECT_EQ(keys.sizes(), (Shape{1, 8, 2, 4}));
  EXPECT_TRUE(keys.is_lazy());
  placed.advance(1);
  EXPECT_TITAN_ERROR(placed.position(), "serves one forward");
  placed.clear();
  EXPECT_EQ(placed.length(), 0);
}

}  // namespace
}  // namespace titan::rl
