// The decoder base (models/common/decoder.h) as a new family meets it: a family defined here with a
// block of its own (sandwich norms, tied embeddings) gets the skeleton's forwards, checks and
// parallel plans, and one built from Llama 3's block is Llama 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "support/test_util.h"
#include "support/tiny_llama3.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/feed_forward.h"
#include "titan/models/common/init.h"
#include "titan/models/common/parallelize.h"
#include "titan/models/common/run_blocks.h"
#include "titan/models/llama3/model.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using models::KVCache;
using models::common::Decoder;
using models::common::DecoderArgs;

constexpr int64_t kDim = 16, kVocab = 13;

// Gemma's placement: each sublayer's output is normed again before it joins the residual stream.
class SandwichBlock : public nn::Module {
 public:
  explicit SandwichBlock(int64_t layer_id) {
    const double init_std = models::common::depth_init_std(layer_id);
    attention = register_module(
        "attention", std::make_shared<models::common::Attention>(
                         models::common::AttentionArgs{.dim = kDim, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4},
                         init_std));
    feed_forward =
        register_module("feed_forward", std::make_shared<models::common::FeedForward>(kDim, 32, init_std));
    attention_norm = register_module("attention_norm", std::make_shared<nn::RMSNorm>(kDim));
    post_attention_norm = register_module("post_attention_norm", std::make_shared<nn::RMSNorm>(kDim));
    ffn_norm = register_module("ffn_norm", std::make_shared<nn::RMSNorm>(kDim));
    post_ffn_norm = register_module("post_ffn_norm", std::make_shared<nn::RMSNorm>(kDim));
  }

  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask) {
    return run_forward(x, [this, table = &rope, mask](const Tensor& in) {
      return residuals(in, (*attention)((*attention_norm)(in), *table, mask));
    });
  }
  Tensor operator()(const Tensor& x, const ops::RopeTable& rope, const attention::BlockMask& mask, KVCache& cache,
                    int64_t layer) {
    return run_forward(x, [&](const Tensor& in) {
      return residuals(in, (*attention)((*attention_norm)(in), rope, mask, cache, layer));
    });
  }

  std::shared_ptr<models::common::Attention> attention;
  std::shared_ptr<models::common::FeedForward> feed_forward;
  std::shared_ptr<nn::RMSNorm> attention_norm, post_attention_norm, ffn_norm, post_ffn_norm;

 private:
  Tensor residuals(const Tensor& x, const Tensor& attended) {
    Tensor h = x + (*post_attention_norm)(attended);
    return h + (*post_ffn_norm)((*feed_forward)((*ffn_norm)(h)));
  }
};

class Sandwich : public Decoder<SandwichBlock> {
 public:
  explicit Sandwich(int64_t max_seq_len)
      : Decoder({.family = "sandwich",
                 .vocab_size = kVocab,
                 .dim = kDim,
                 .n_layers = 3,
                 .head_dim = 4,
                 .max_seq_len = max_seq_len,
                 .tie_embeddings = true},
                {}, {.splash = true, .block_q = 4, .block_kv = 4},
                [](int64_t i) { return std::make_shared<SandwichBlock>(i); }) {}

 private:
  Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) override {
    return models::common::run_blocks(*layers, first, last, h,
                                      [this, mask](SandwichBlock& block, const Tensor& x) { return block(x, rope(), mask); });
  }
  Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) override {
    Tensor out = h;
    int64_t layer = 0;
    for (const auto& block : *layers) out = (*block)(out, rope(), mask, cache, layer++);
    return out;
  }
};

// Nothing of its own but the sizes: Llama 3's block under the base.
class LlamaThroughTheBase : public Decoder<models::llama3::TransformerBlock> {
 public:
  explicit LlamaThroughTheBase(const models::llama3::ModelArgs& a)
      : Decoder({.family = "llama-through-the-base",
                 .vocab_size = a.vocab_size,
                 .dim = a.dim,
                 .n_layers = a.n_layers,
                 .head_dim = a.head_dim(),
                 .max_seq_len = a.max_seq_len,
                 .norm = {.eps = a.norm_eps},
                 .rope_theta = a.rope_theta,
                 .rope_scaling = a.rope_scaling_if_used()},
                {}, {}, [&a](int64_t i) { return std::make_shared<models::llama3::TransformerBlock>(i, a); }) {}

 private:
  Tensor forward_blocks(const Tensor& h, int64_t first, int64_t last, const attention::BlockMask& mask) override {
    return models::common::run_blocks(
        *layers, first, last, h,
        [this, mask](models::llama3::TransformerBlock& block, const Tensor& x) { return block(x, rope(), mask); });
  }
  Tensor forward_blocks_cached(const Tensor& h, const attention::BlockMask& mask, KVCache& cache) override {
    Tensor out = h;
    int64_t layer = 0;
    for (const auto& block : *layers) out = (*block)(out, rope(), mask, cache, layer++);
    return out;
  }
};

Tensor random_tokens(int64_t B, int64_t S, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * S; ++i)
    ids.push_back(static_cast<int64_t>(philox_uniform_f64(seed, static_cast<uint64_t>(i)) * kVocab));
  return Tensor::from_vector(ids, {B, S});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

std::shared_ptr<Sandwich> initialised_sandwich(int64_t max_seq_len) {
  auto m = std::make_shared<Sandwich>(max_seq_len);
  Generator gen(3);
  m->init_weights(gen);
  return m;
}

TEST(Decoder, FamilyOfItsOwnBlockGetsTheSkeleton) {
  const std::shared_ptr<Sandwich> m = initialised_sandwich(12);
  EXPECT_EQ(m->num_layers(), 3);
  EXPECT_EQ(m->hidden_size(), kDim);
  EXPECT_EQ(m->vocab_size(), kVocab);
  EXPECT_EQ(m->max_seq_len(), 12);
  EXPECT_EQ(m->attentions().size(), 3u);
  EXPECT_EQ(&m->blocks(), m->layers.get());

  // Tied: no output projection, and the base's init (std dim^-0.5 cut at 3 std) went to the
  // embedding instead of its own normal(0, 1).
  EXPECT_EQ(m->output, nullptr);
  const nn::StateDict state = m->state_dict();
  EXPECT_EQ(state.count("output.weight"), 0u);
  EXPECT_EQ(state.count("layers.2.post_ffn_norm.weight"), 1u);
  std::vector<float> w = m->tok_embeddings->weight.to_vector<float>();
  float largest = 0;
  for (float v : w) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 0.0f);
  EXPECT_LE(largest, 0.75f);

  // The RoPE tables are buffers (context parallelism finds them by name) that checkpoints skip.
  EXPECT_EQ(state.count("rope_cos"), 0u);
  int tables = 0;
  for (const auto& [name, buffer] : m->named_buffers()) tables += name == "rope_cos" || name == "rope_sin";
  EXPECT_EQ(tables, 2);

  EXPECT_TITAN_ERROR((*m)(random_tokens(1, 13, 1)), "sandwich Transformer", "max_seq_len (12)");
}

TEST(Decoder, ForwardLayersOverASplitAndCachedDecodingGiveTheForwardsLogits) {
  const std::shared_ptr<Sandwich> m = initialised_sandwich(12);
  const int64_t B = 2, S = 10;
  const Tensor tokens = random_tokens(B, S, 4);
  autograd::NoGradGuard no_grad;
  const Tensor full = (*m)(tokens);
  ASSERT_EQ(full.sizes(), (Shape{B, S, kVocab}));

  const Tensor h = m->forward_layers(tokens, Tensor(), Tensor(), 0, 2);
  EXPECT_EQ(h.sizes(), (Shape{B, S, kDim}));
  EXPECT_LE(max_abs_diff(m->forward_layers(tokens, Tensor(), h, 2, 3), full), 1e-6);

  KVCache cache(B, 12);
  int64_t pos = 0;
  for (int64_t len : {6, 2, 1, 1}) {
    EXPECT_LE(max_abs_diff(m->forward_cached(tokens.narrow(1, pos, len), cache), full.narrow(1, pos, len)), 1e-5)
        << "positions " << pos << ".." << pos + len;
    pos += len;
  }
  EXPECT_EQ(cache.length(), S);
}

TEST(Decoder, ParallelizeWithoutAMeshCheckpointsEveryBlockAndKeepsTheGradients) {
  const Tensor tokens = random_tokens(2, 8, 5);
  const Tensor probe = test::rand_f32({2, 8, kVocab}, 6);
  auto embedding_grad = [&](Sandwich& m) {
    ops::sum(m(tokens) * probe).backward();
    return m.tok_embeddings->weight.grad();
  };
  const std::shared_ptr<Sandwich> plain = initialised_sandwich(8), checkpointed = initialised_sandwich(8);
  const models::Parallelized out =
      models::common::parallelize_decoder(*checkpointed, {.activation_checkpoint_mode = "full"}, {});
  EXPECT_EQ(out.fsdp, nullptr);
  EXPECT_EQ(out.tp, nullptr);
  for (const auto& block : *checkpointed->layers) EXPECT_TRUE(block->has_forward_wrapper());
  EXPECT_LE(max_abs_diff(embedding_grad(*checkpointed), embedding_grad(*plain)), 1e-6);
}

TEST(Decoder, LlamaBlocksThroughTheBaseAreLlama3) {
  const models::llama3::ModelArgs args = test::tiny_llama3_args(8);
  models::llama3::Transformer llama(args);
  LlamaThroughTheBase mine(args);
  Generator a(5), b(5);
  llama.init_weights(a);
  mine.init_weights(b);
  test::expect_same_state(mine.state_dict(), llama.state_dict());
  const Tensor tokens = Tensor::from_vector<int64_t>({1, 4, 0, 10, 7, 3, 3, 9}, {2, 4});
  EXPECT_TRUE(test::same_bits(mine(tokens), llama(tokens)));
}

}  // namespace
}  // namespace titan
