// The KV cache and decoding over it: the cache's bookkeeping, decode_attention against the
// reference path's rows, and the model's cached forward against the full forward it replaces.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "support/test_util.h"
#include "titan/attention/block_mask.h"
#include "titan/attention/decode.h"
#include "titan/attention/mask.h"
#include "titan/attention/reference.h"
#include "titan/attention/splash.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/kv_cache.h"
#include "titan/models/llama3/model.h"

namespace titan {
namespace {

using models::KVCache;
using models::llama3::AttentionKernel;
using models::llama3::ModelArgs;
using models::llama3::Transformer;
using test::rand_f32;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// ---- the cache -----------------------------------------------------------------------------------

TEST(KvCache, AppendReturnsEveryPositionSoFar) {
  autograd::NoGradGuard no_grad;
  KVCache cache(2, 6);
  Tensor k1 = rand_f32({2, 4, 3, 5}, 1), v1 = rand_f32({2, 4, 3, 5}, 2);
  auto [keys, values] = cache.append(0, k1, v1);
  EXPECT_EQ(keys.sizes(), (Shape{2, 4, 3, 5}));
  EXPECT_EQ(max_abs_diff(keys, k1), 0.0);
  cache.advance(4);
  EXPECT_EQ(cache.length(), 4);

  Tensor k2 = rand_f32({2, 2, 3, 5}, 3), v2 = rand_f32({2, 2, 3, 5}, 4);
  std::tie(keys, values) = cache.append(0, k2, v2);
  EXPECT_EQ(keys.sizes(), (Shape{2, 6, 3, 5}));
  EXPECT_EQ(max_abs_diff(keys.narrow(1, 0, 4), k1), 0.0);
  EXPECT_EQ(max_abs_diff(keys.narrow(1, 4, 2), k2), 0.0);
  EXPECT_EQ(max_abs_diff(values.narrow(1, 4, 2), v2), 0.0);
  cache.advance(2);

  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  std::tie(keys, values) = cache.append(0, k2, v2);
  EXPECT_EQ(keys.sizes(), (Shape{2, 2, 3, 5}));
  EXPECT_EQ(max_abs_diff(values, v2), 0.0);
}

TEST(KvCache, MisuseIsAClearError) {
  autograd::NoGradGuard no_grad;
  Tensor k = rand_f32({1, 3, 2, 4}, 1);
  KVCache cache(1, 4);
  EXPECT_TITAN_ERROR(KVCache(0, 4), "batch and max_len must be at least 1");
  EXPECT_TITAN_ERROR(cache.append(0, rand_f32({2, 3, 2, 4}, 1), rand_f32({2, 3, 2, 4}, 2)), "[batch 1");
  EXPECT_TITAN_ERROR(cache.append(0, rand_f32({1, 5, 2, 4}, 1), rand_f32({1, 5, 2, 4}, 2)), "overflow",
                     "max_len 4");
  EXPECT_TITAN_ERROR(cache.advance(3), "no layer has appended");
  cache.append(1, k, k);
  EXPECT_TITAN_ERROR(cache.append(1, k, k), "layer 1 already holds 3 positions");
  EXPECT_TITAN_ERROR(cache.advance(3), "layer 0 holds 0 positions, expected 3");
  cache.append(0, k, k);
  cache.advance(3);
  EXPECT_TITAN_ERROR(cache.append(0, rand_f32({1, 1, 4, 2}, 1), rand_f32({1, 1, 4, 2}, 2)),
                     "heads, head_dim and dtype must stay the same");
}

TEST(KvCache, RefusesTensorsThatRequireGrad) {
  Tensor k = rand_f32({1, 2, 2, 4}, 1).requires_grad_();
  KVCache cache(1, 4);
  EXPECT_TITAN_ERROR(cache.append(0, k, k), "cannot carry gradients", "NoGradGuard");
}

// ---- decode_attention ----------------------------------------------------------------------------

// The last Sq rows of causal attention over Skv positions, computed for all rows by the reference.
TEST(KvCache, DecodeAttentionEqualsTheLastRowsOfFullAttention) {
  autograd::NoGradGuard no_grad;
  const int64_t B = 2, Skv = 70, Hq = 4, Hkv = 2, D = 8;
  Tensor q = rand_f32({B, Skv, Hq, D}, 1), k = rand_f32({B, Skv, Hkv, D}, 2),
         v = rand_f32({B, Skv, Hkv, D}, 3);
  Tensor full = attention::attention_reference(q, k, v);
  // One token, a chunk, and more rows than a score block (64) holds.
  for (int64_t Sq : {1, 5, 67, 70}) {
    Tensor out = attention::decode_attention(q.narrow(1, Skv - Sq, Sq), k, v);
    EXPECT_LE(max_abs_diff(out, full.narrow(1, Skv - Sq, Sq)), 1e-6) << "Sq " << Sq;
  }
  // Keys and values read in place from a larger buffer, as from a cache of 80 positions.
  Tensor kbuf = Tensor::zeros({B, 80, Hkv, D}), vbuf = Tensor::zeros({B, 80, Hkv, D});
  kbuf.narrow(1, 0, Skv).copy_(k);
  vbuf.narrow(1, 0, Skv).copy_(v);
  Tensor out =
      attention::decode_attention(q.narrow(1, Skv - 3, 3), kbuf.narrow(1, 0, Skv), vbuf.narrow(1, 0, Skv));
  EXPECT_LE(max_abs_diff(out, full.narrow(1, Skv - 3, 3)), 1e-6);
}

// A model trained with a sliding window, a logit cap and a scale of its own decodes with the same:
// the last rows of the full forward under the window mask (splash attention, the same options),
// for windows shorter than a score block, longer than the sequence, and of the query alone.
TEST(KvCache, DecodeAttentionWithWindowCapAndScaleEqualsTheFullForward) {
  autograd::NoGradGuard no_grad;
  const int64_t B = 2, Skv = 150, Hq = 4, Hkv = 2, D = 8;
  Tensor q = rand_f32({B, Skv, Hq, D}, 1, -2, 2), k = rand_f32({B, Skv, Hkv, D}, 2, -2, 2),
         v = rand_f32({B, Skv, Hkv, D}, 3);
  Tensor kbuf = Tensor::zeros({B, 160, Hkv, D}), vbuf = Tensor::zeros({B, 160, Hkv, D});
  kbuf.narrow(1, 0, Skv).copy_(k);
  vbuf.narrow(1, 0, Skv).copy_(v);
  for (const int64_t left : {0, 5, 40, 200})
    for (const std::optional<double> softcap : {std::optional<double>(), std::optional<double>(1.5)}) {
      const attention::DecodeOptions opts{.scale = 0.6, .softcap = softcap, .window_left = left};
      const std::string what = "window " + std::to_string(left) + (softcap ? ", softcap" : "");
      const Tensor full = attention::splash_attention(
          q, k, v, attention::BlockMask::build(attention::Mask::sliding_window(left), B, Skv, 32, 32),
          {.scale = opts.scale, .softcap = softcap});
      // One token, a chunk, and more rows than a score block (64) holds.
      for (int64_t Sq : {1, 5, 67, 150}) {
        const Tensor out = attention::decode_attention(q.narrow(1, Skv - Sq, Sq), k, v, opts);
        EXPECT_LE(max_abs_diff(out, full.narrow(1, Skv - Sq, Sq)), 1e-5) << what << ", Sq " << Sq;
      }
      // At a position within a cache's buffers, whose later positions take no part.
      const Tensor at =
          attention::decode_attention(q.narrow(1, 90, 3), kbuf, vbuf, Tensor::scalar<int64_t>(90), opts);
      const Tensor prefix = attention::splash_attention(
          q.narrow(1, 0, 93).contiguous(), k.narrow(1, 0, 93).contiguous(), v.narrow(1, 0, 93).contiguous(),
          attention::BlockMask::build(attention::Mask::sliding_window(left), B, 93, 32, 32),
          {.scale = opts.scale, .softcap = softcap});
      EXPECT_LE(max_abs_diff(at, prefix.narrow(1, 90, 3)), 1e-5) << what << ", at position 90";
    }
  // Without a window, the cap and scale against the reference path.
  const Tensor full = attention::attention_reference(q, k, v, {.scale = 0.6, .softcap = 1.5});
  const Tensor out =
      attention::decode_attention(q.narrow(1, Skv - 4, 4), k, v, {.scale = 0.6, .softcap = 1.5});
  EXPECT_LE(max_abs_diff(out, full.narrow(1, Skv - 4, 4)), 1e-5);
  // The options change the result (else the comparisons above would prove nothing).
  EXPECT_GT(max_abs_diff(out, attention::decode_attention(q.narrow(1, Skv - 4, 4), k, v, {.scale = 0.6})),
            1e-2);
  EXPECT_GT(max_abs_diff(out, attention::decode_attention(q.narrow(1, Skv - 4, 4), k, v,
                                                          {.scale = 0.6, .softcap = 1.5, .window_left = 40})),
            1e-2);
}

TEST(KvCache, DecodeAttentionChecksItsArguments) {
  Tensor q = rand_f32({1, 3, 4, 8}, 1), k = rand_f32({1, 2, 2, 8}, 2);
  EXPECT_TITAN_ERROR(attention::decode_attention(q, k, k), "1 <= Sq <= Skv");
  Tensor k3 = rand_f32({1, 5, 3, 8}, 3);
  EXPECT_TITAN_ERROR(attention::decode_attention(q, k3, k3), "must be a multiple of key/value heads");
  Tensor kg = rand_f32({1, 5, 2, 8}, 4).requires_grad_();
  EXPECT_TITAN_ERROR(attention::decode_attention(q, kg, kg), "no backward", "NoGradGuard");
  Tensor k5 = rand_f32({1, 5, 2, 8}, 5);
  EXPECT_TITAN_ERROR(attention::decode_attention(q, k5, k5, {.window_left = -1}), "window_left must be >= 0");
  EXPECT_TITAN_ERROR(attention::decode_attention(q, k5, k5, {.softcap = 0.0}),
                     "softcap must be finite and > 0");
  EXPECT_TITAN_ERROR(attention::decode_attention(q, k5, k5, {.scale = NAN}), "scale must be finite");
}

// ---- the model's cached forward --------------------------------------------------------------------

// Grouped-query attention (4 query heads over 2 kv heads), 3 layers, 24 positions.
ModelArgs small_args() {
  ModelArgs a;
  a.dim = 32;
  a.n_layers = 3;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 37;
  a.multiple_of = 16;
  a.max_seq_len = 24;
  return a;
}

Tensor random_tokens(int64_t B, int64_t S, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * S; ++i)
    ids.push_back(static_cast<int64_t>(philox_uniform_f64(seed, static_cast<uint64_t>(i)) *
                                       static_cast<double>(vocab)));
  return Tensor::from_vector(ids, {B, S});
}

// A prefill of part of the sequence, a chunk, then one token at a time give the logits of the
// full forward over the whole sequence, with either attention kernel for the training path
// (splash in 8 x 8 tiles, so the prefill spans several).
TEST(KvCache, CachedLogitsEqualFullRecompute) {
  const int64_t B = 2, S = 20;
  for (bool splash : {true, false}) {
    SCOPED_TRACE(splash ? "splash" : "reference");
    Transformer model(small_args(), {}, AttentionKernel{splash, 8, 8});
    Generator gen(7);
    model.init_weights(gen);
    Tensor tokens = random_tokens(B, S, small_args().vocab_size, 3);
    Tensor full;
    {
      autograd::NoGradGuard no_grad;
      full = model(tokens);
    }

    KVCache cache(B, S);
    int64_t pos = 0;
    for (int64_t len : {11, 3, 1, 1, 1, 1, 1, 1}) {
      Tensor logits = model.forward_cached(tokens.narrow(1, pos, len), cache);
      EXPECT_FALSE(logits.requires_grad());
      EXPECT_LE(max_abs_diff(logits, full.narrow(1, pos, len)), 1e-5)
          << "positions " << pos << ".." << pos + len;
      pos += len;
      EXPECT_EQ(cache.length(), pos);
    }
    ASSERT_EQ(pos, S);
    EXPECT_TRUE(autograd::grad_enabled()) << "forward_cached must restore grad mode";
    EXPECT_TITAN_ERROR(model.forward_cached(tokens.narrow(1, 0, 1), cache), "overflow");
  }
}

TEST(KvCache, CachedForwardStopsAtMaxSeqLen) {
  Transformer model(small_args());
  KVCache cache(1, 40);
  Tensor tokens = random_tokens(1, 25, small_args().vocab_size, 1);
  EXPECT_TITAN_ERROR(model.forward_cached(tokens, cache), "max_seq_len (24)");
  model.forward_cached(tokens.narrow(1, 0, 24), cache);
  EXPECT_TITAN_ERROR(model.forward_cached(tokens.narrow(1, 24, 1), cache), "reaching 25");
}

}  // namespace
}  // namespace titan
