// T5 v1.1's encoder (FLUX's text_encoder_2) against transformers' T5EncoderModel: a tiny seeded
// model's last_hidden_state with and without a padding mask, the relative-position buckets, its
// folders in every form transformers writes (single file, shards, either embedding name), export
// that transformers loads back bit for bit, bf16 autocast, and clear refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "support/test_util.h"
#include "support/text_encoder_fixtures.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/gradcheck.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/autocast.h"
#include "titan/core/meta.h"
#include "titan/models/common/dense_attention.h"
#include "titan/models/t5/model.h"
#include "titan/models/t5/state_dict_adapter.h"
#include "titan/ops/arith.h"
#include "titan/train/flux/text_encoder_folders.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using models::t5::T5Encoder;
using nlohmann::json;

constexpr double kTol = 1e-5;

fs::path t5_root() {
  return test::text_encoder_fixtures() / "t5";
}

checkpoint::SafetensorsFile t5_reference() {
  return checkpoint::read_safetensors((t5_root() / "reference.safetensors").string());
}

// The encoder's outputs on the reference's ids, then its padded ids under the mask, against
// transformers'.
void expect_matches_reference(T5Encoder& model, const std::string& what) {
  const checkpoint::SafetensorsFile ref = t5_reference();
  const auto& r = ref.tensors;
  const autograd::NoGradGuard no_grad;
  const Tensor plain = model.forward(r.at("ids")), padded = model.forward(r.at("ids_padded"), r.at("mask"));
  EXPECT_TRUE(test::tensors_close(plain, r.at("last_hidden_state"), kTol, what));
  EXPECT_TRUE(test::tensors_close(padded, r.at("last_hidden_state_padded"), kTol, what + ", padded"));
  std::cout << "[ measured ] " << what << " vs transformers: max relative error "
            << test::max_rel_error(plain, r.at("last_hidden_state")) << ", padded "
            << test::max_rel_error(padded, r.at("last_hidden_state_padded")) << "\n";
}

TEST(T5Encoder, BucketsMatchTransformers) {
  const checkpoint::SafetensorsFile file =
      checkpoint::read_safetensors((test::text_encoder_fixtures() / "buckets.safetensors").string());
  int configs = 0;
  for (const auto& [name, positions] : file.tensors) {
    if (!name.starts_with("positions")) continue;
    const std::string dims = name.substr(std::string("positions").size());
    const int64_t buckets = std::stoll(dims.substr(0, dims.find('_'))),
                  distance = std::stoll(dims.substr(dims.find('_') + 1));
    const std::vector<int64_t> rel = positions.to_vector<int64_t>(),
                               want = file.tensors.at("b" + dims).to_vector<int64_t>();
    for (size_t i = 0; i < rel.size(); ++i)
      ASSERT_EQ(models::t5::relative_position_bucket(rel[i], buckets, distance), want[i])
          << "relative position " << rel[i] << ", " << buckets << " buckets, max distance " << distance;
    ++configs;
  }
  EXPECT_GE(configs, 5);
  // Entry (q, k) is the bucket of k - q: keys after the query in the upper half of the buckets.
  const std::vector<int64_t> table = models::t5::relative_position_buckets(3, 8, 16).to_vector<int64_t>();
  EXPECT_EQ(table, (std::vector<int64_t>{0, 5, 6, 1, 0, 5, 2, 1, 0}));
}

TEST(T5Encoder, MatchesTransformers) {
  auto model = train::flux::load_t5_encoder(t5_root() / "model");
  expect_matches_reference(*model, "t5 last_hidden_state");
}

TEST(T5Encoder, ShardedFoldersAndEitherEmbeddingNameLoadTheSameWeights) {
  const nn::StateDict want = train::flux::load_t5_encoder(t5_root() / "model")->state_dict();
  test::expect_same_state(train::flux::load_t5_encoder(t5_root() / "sharded")->state_dict(), want);
  test::expect_same_state(train::flux::load_t5_encoder(t5_root() / "embed_tokens")->state_dict(), want);
  // Both names, one table twice: accepted; two different tables: refused, naming both.
  const fs::path both = test::with_tensors(t5_root() / "model", "t5_both_embeddings", [](auto& t) {
    t["encoder.embed_tokens.weight"] = t.at("shared.weight").clone();
  });
  test::expect_same_state(train::flux::load_t5_encoder(both)->state_dict(), want);
  const fs::path differ = test::with_tensors(t5_root() / "model", "t5_two_embeddings", [](auto& t) {
    t["encoder.embed_tokens.weight"] = t.at("shared.weight") * 2.0;
  });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(differ), "shared.weight", "encoder.embed_tokens.weight",
                     "differ");
}

TEST(T5Encoder, ExportIsBitIdenticalAndTransformersLoadsIt) {
  const fs::path original = t5_root() / "model";
  auto model = train::flux::load_t5_encoder(original);
  const fs::path out = test::fresh_temp_dir("t5_export") / "model";
  train::flux::save_t5_encoder(out, *model, kF32, checkpoint::HfReader(original).config());
  // Every tensor bit for bit under save_pretrained's names, every config.json key as it wrote it.
  test::expect_same_hf_folder(out, original);
  test::expect_same_state(train::flux::load_t5_encoder(out)->state_dict(), model->state_dict());
  // Without the file's own keys (pad_token_id, dropout_rate, ...), transformers' defaults serve.
  const fs::path bare = test::fresh_temp_dir("t5_export_bare") / "model";
  train::flux::save_t5_encoder(bare, *model);
  const std::string reference = " --reference '" + (t5_root() / "reference.safetensors").string() + "'";
  EXPECT_TRUE(test::run_text_encoders_script("check --model '" + out.string() + "'" + reference +
                                             " --model '" + bare.string() + "'" + reference));
}

// Under bf16 autocast the products run in bf16 (8 significant bits) with f32 accumulation; two
// blocks of them stay within 2% of float32 (measured 6.9e-3 on a Xeon with AVX512-BF16).
TEST(T5Encoder, Bf16AutocastStaysNearFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
  auto model = train::flux::load_t5_encoder(t5_root() / "model");
  const checkpoint::SafetensorsFile ref = t5_reference();
  const autograd::NoGradGuard no_grad;
  const Tensor f32 = model->forward(ref.tensors.at("ids_padded"), ref.tensors.at("mask"));
  Tensor bf16;
  {
    const AutocastGuard autocast(kBF16);
    bf16 = model->forward(ref.tensors.at("ids_padded"), ref.tensors.at("mask"));
  }
  EXPECT_EQ(bf16.dtype(), kF32);
  const double err = test::max_rel_error(bf16, f32);
  EXPECT_GT(err, 0.0) << "autocast changed nothing: were the products run in bf16?";
  EXPECT_LT(err, 2e-2);
  std::cout << "[ measured ] t5 bf16 autocast vs f32: max relative error " << err << "\n";
}

TEST(T5Encoder, PaddingMasksOnlyThePaddedKeys) {
  auto model = train::flux::load_t5_encoder(t5_root() / "model");
  const checkpoint::SafetensorsFile ref = t5_reference();
  const Tensor ids = ref.tensors.at("ids");
  const autograd::NoGradGuard no_grad;
  // A mask of ones is no mask; row 1 masked to its first 13 tokens gives, at those positions,
  // the encoding of those 13 tokens alone.
  EXPECT_TRUE(
      test::same_bits(model->forward(ids, Tensor::ones(ids.sizes(), {.dtype = kI64})), model->forward(ids)));
  const Tensor padded = model->forward(ref.tensors.at("ids_padded"), ref.tensors.at("mask"));
  const Tensor alone = model->forward(ref.tensors.at("ids_padded").narrow(0, 1, 1).narrow(1, 0, 13));
  EXPECT_TRUE(test::tensors_close(padded.narrow(0, 1, 1).narrow(1, 0, 13), alone, kTol, "row 1's tokens"));
  EXPECT_TITAN_ERROR(model->forward(ids, Tensor::full(ids.sizes(), 2, {.dtype = kI64})), "attention mask",
                     "is 2");
  EXPECT_TITAN_ERROR(model->forward(ids, Tensor::ones({3, 5}, {.dtype = kI64})), "attention mask",
                     "i64[3, 5]", "i64[3, 20]");
  EXPECT_TITAN_ERROR(model->forward(ids.to(kF32)), "t5 encoder", "f32[3, 20]");
}

TEST(T5Encoder, BadFoldersAreClearErrors) {
  const fs::path original = t5_root() / "model";
  const fs::path relu =
      test::edited_copy(original, "t5_relu", [](json& c) { c["feed_forward_proj"] = "relu"; });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(relu), "feed_forward_proj", "\"relu\"", "gated-gelu");
  const fs::path decoder = test::edited_copy(original, "t5_decoder", [](json& c) { c["is_decoder"] = true; });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(decoder), "is_decoder");
  const fs::path buckets =
      test::edited_copy(original, "t5_buckets", [](json& c) { c["relative_attention_num_buckets"] = 2; });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(buckets), "relative_attention_num_buckets", "got 2");
  const fs::path other = test::edited_copy(original, "t5_other", [](json& c) { c["model_type"] = "mt5"; });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(other), "model_type", "mt5");
  const fs::path wide = test::edited_copy(original, "t5_wide", [](json& c) { c["d_ff"] = 38; });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(wide), "encoder.block.1.layer.1.DenseReluDense.wi_0.weight",
                     "f32[37, 32]", "expected shape [38, 32]", "Nothing was loaded");
  const fs::path missing = test::with_tensors(original, "t5_missing", [](auto& t) {
    t.erase("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
  });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(missing),
                     "missing tensor 'encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight'",
                     "[8, 4]");
  const fs::path no_embedding =
      test::with_tensors(original, "t5_no_embedding", [](auto& t) { t.erase("shared.weight"); });
  EXPECT_TITAN_ERROR(train::flux::load_t5_encoder(no_embedding), "missing tensor 'shared.weight'");
}

// FLUX's text_encoder_2, google/t5-v1_1-xxl's encoder: 4,762,310,656 parameters (built as shapes
// only).
TEST(T5Encoder, XxlFlavorHasTheReleasedParameterCount) {
  const MetaScope meta;
  EXPECT_EQ(T5Encoder(models::t5::flavor("xxl")).num_parameters(), 4762310656);
  EXPECT_TITAN_ERROR(models::t5::flavor("xl"), "unknown flavor 'xl'", "xxl");
}

TEST(T5Encoder, ForwardMatmulFlopsCountEveryGemmOfTheForward) {
  // Heads of 6: their width (24) need not be d_model.
  T5Encoder model({.vocab_size = 50, .d_model = 32, .d_kv = 6, .d_ff = 37, .n_layers = 2, .n_heads = 4});
  test::expect_forward_matmul_flops_counted(model, 50, 9);
}

// The attention the encoders share, with an additive bias that broadcasts over the batch and one
// over the heads and queries (a padding mask), against finite differences.
TEST(DenseAttention, GradcheckWithBias) {
  const Tensor q = test::rand_f64({2, 5, 3, 4}, 1), k = test::rand_f64({2, 5, 3, 4}, 2),
               v = test::rand_f64({2, 5, 3, 4}, 3), head_bias = test::rand_f64({1, 3, 5, 5}, 4);
  const Tensor mask = models::common::attention_bias(
      Tensor::from_vector<int64_t>({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 5}), 5, true, kF64);
  ASSERT_EQ(mask.sizes(), (Shape{2, 1, 5, 5}));
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{models::common::dense_attention(in[0], in[1], in[2], 0.7, in[3] + mask)};
      },
      {q, k, v, head_bias});
  EXPECT_TRUE(res.ok) << res.message;
  EXPECT_FALSE(models::common::attention_bias(Tensor(), 5, false, kF32).defined());
}

}  // namespace
}  // namespace titan
