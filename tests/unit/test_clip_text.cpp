// CLIP's text model (FLUX's text_encoder) against transformers' CLIPTextModel: tiny seeded models
// under both pooling rules (eos_token_id 2, the legacy argmax, and another id, its first position),
// last_hidden_state and pooler_output with and without a padding mask, transformers 4's and 5's
// tensor names, export that transformers loads back bit for bit, bf16 autocast, and clear
// refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "support/test_util.h"
#include "support/text_encoder_fixtures.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/autocast.h"
#include "titan/core/meta.h"
#include "titan/models/clip/model.h"
#include "titan/models/clip/state_dict_adapter.h"
#include "titan/ops/arith.h"
#include "titan/ops/reduce.h"
#include "titan/train/flux/text_encoder_folders.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
using models::clip::ClipTextModel;
using nlohmann::json;

constexpr double kTol = 1e-5;

// clip_eos2: eos_token_id 2 (pooled at the largest id); clip_eos: another id (its first position).
const char* const kCases[] = {"clip_eos2", "clip_eos"};

fs::path clip_root(const std::string& fixture) {
  return test::text_encoder_fixtures() / fixture;
}

checkpoint::SafetensorsFile clip_reference(const std::string& fixture) {
  return checkpoint::read_safetensors((clip_root(fixture) / "reference.safetensors").string());
}

void expect_matches_reference(ClipTextModel& model, const std::string& fixture, const std::string& what) {
  const checkpoint::SafetensorsFile ref = clip_reference(fixture);
  const auto& r = ref.tensors;
  const autograd::NoGradGuard no_grad;
  const models::clip::ClipTextOutput plain = model.forward(r.at("ids"));
  EXPECT_TRUE(test::tensors_close(plain.last_hidden_state, r.at("last_hidden_state"), kTol,
                                  what + " last_hidden_state"));
  EXPECT_TRUE(test::tensors_close(plain.pooler_output, r.at("pooler_output"), kTol, what + " pooler_output"));
  const models::clip::ClipTextOutput padded = model.forward(r.at("ids_padded"), r.at("mask"));
  EXPECT_TRUE(test::tensors_close(padded.last_hidden_state, r.at("last_hidden_state_padded"), kTol,
                                  what + " last_hidden_state, padded"));
  EXPECT_TRUE(test::tensors_close(padded.pooler_output, r.at("pooler_output_padded"), kTol,
                                  what + " pooler_output, padded"));
  std::cout << "[ measured ] " << what << " vs transformers: max relative error "
            << test::max_rel_error(plain.last_hidden_state, r.at("last_hidden_state")) << ", padded "
            << test::max_rel_error(padded.last_hidden_state, r.at("last_hidden_state_padded")) << "\n";
}

TEST(ClipText, MatchesTransformersUnderBothPoolingRules) {
  for (const char* fixture : kCases) {
    auto model = train::flux::load_clip_text(clip_root(fixture) / "model");
    expect_matches_reference(*model, fixture, fixture);
  }
}

TEST(ClipText, PooledPositionsFollowTransformersRules) {
  models::clip::ModelArgs args;
  args.dim = 8;
  args.ffn_dim = 8;
  args.n_layers = 1;
  args.n_heads = 2;
  args.vocab_size = 10;
  const Tensor ids = Tensor::from_vector<int32_t>({0, 9, 4, 9, 5,   // the largest id twice; eos 5 after it
                                                   0, 3, 5, 5, 9,   // eos twice, the largest id last
                                                   0, 3, 4, 6, 7},  // no eos
                                                  {3, 5});
  args.eos_token_id = 2;  // legacy: the first position of the largest id
  EXPECT_EQ(ClipTextModel(args).pooled_positions(ids), (std::vector<int64_t>{1, 4, 4}));
  args.eos_token_id = 5;  // the first eos; 0 where there is none
  EXPECT_EQ(ClipTextModel(args).pooled_positions(ids), (std::vector<int64_t>{4, 2, 0}));
}

TEST(ClipText, TransformersFourNamesLoadTheSameWeights) {
  const nn::StateDict want = train::flux::load_clip_text(clip_root("clip_eos2") / "model")->state_dict();
  test::expect_same_state(train::flux::load_clip_text(clip_root("clip_eos2") / "legacy")->state_dict(), want);
}

TEST(ClipText, ExportIsBitIdenticalAndTransformersLoadsIt) {
  std::string check = "check";
  for (const char* fixture : kCases) {
    const fs::path original = clip_root(fixture) / "model";
    auto model = train::flux::load_clip_text(original);
    const fs::path out = test::fresh_temp_dir(std::string(fixture) + "_export") / "model";
    train::flux::save_clip_text(out, *model, kF32, checkpoint::HfReader(original).config());
    test::expect_same_hf_folder(out, original);
    test::expect_same_state(train::flux::load_clip_text(out)->state_dict(), model->state_dict());
    check += " --model '" + out.string() + "' --reference '" +
             (clip_root(fixture) / "reference.safetensors").string() + "'";
  }
  // From the transformers 4 names, the export is under transformers 5's; without the file's own
  // keys, transformers' defaults serve.
  auto legacy = train::flux::load_clip_text(clip_root("clip_eos2") / "legacy");
  const fs::path out = test::fresh_temp_dir("clip_legacy_export") / "model";
  train::flux::save_clip_text(out, *legacy);
  check += " --model '" + out.string() + "' --reference '" +
           (clip_root("clip_eos2") / "reference.safetensors").string() + "'";
  EXPECT_TRUE(test::run_text_encoders_script(check));
}

// As T5's (test_t5_encoder.cpp): measured 4.1e-3 over five blocks.
TEST(ClipText, Bf16AutocastStaysNearFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
  auto model = train::flux::load_clip_text(clip_root("clip_eos") / "model");
  const checkpoint::SafetensorsFile ref = clip_reference("clip_eos");
  const autograd::NoGradGuard no_grad;
  const models::clip::ClipTextOutput f32 =
      model->forward(ref.tensors.at("ids_padded"), ref.tensors.at("mask"));
  models::clip::ClipTextOutput bf16;
  {
    const AutocastGuard autocast(kBF16);
    bf16 = model->forward(ref.tensors.at("ids_padded"), ref.tensors.at("mask"));
  }
  const double hidden = test::max_rel_error(bf16.last_hidden_state, f32.last_hidden_state),
               pooled = test::max_rel_error(bf16.pooler_output, f32.pooler_output);
  EXPECT_GT(hidden, 0.0) << "autocast changed nothing: were the products run in bf16?";
  EXPECT_LT(hidden, 2e-2);
  EXPECT_LT(pooled, 2e-2);
  std::cout << "[ measured ] clip bf16 autocast vs f32: max relative error " << hidden
            << " (last_hidden_state), " << pooled << " (pooler_output)\n";
}

// The pooled output is the final state at each row's pooled position, bit for bit, and
// gradients flow back through it to the weights.
TEST(ClipText, PoolerOutputIsTheStateAtThePooledPosition) {
  auto model = train::flux::load_clip_text(clip_root("clip_eos") / "model");
  const Tensor ids = clip_reference("clip_eos").tensors.at("ids");
  const models::clip::ClipTextOutput out = model->forward(ids);
  const std::vector<int64_t> pooled = model->pooled_positions(ids);
  for (int64_t b = 0; b < ids.size(0); ++b)
    EXPECT_TRUE(test::same_bits(
        out.pooler_output.narrow(0, b, 1).contiguous(),
        out.last_hidden_state.narrow(0, b, 1).narrow(1, pooled[b], 1).reshape({1, model->args().dim})))
        << "row " << b << ", pooled at " << pooled[b];
  ops::sum(out.pooler_output).backward();
  const Tensor g = (*model->layers)[0].feed_forward->w1->weight.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_GT(ops::sum(ops::square(g)).item(), 0.0);
}

// FLUX's text_encoder, openai/clip-vit-large-patch14's text model: 123,060,480 parameters (built
// as shapes only).
TEST(ClipText, VitLargeFlavorHasTheReleasedParameterCount) {
  const MetaScope meta;
  EXPECT_EQ(ClipTextModel(models::clip::flavor("vit-large-patch14")).num_parameters(), 123060480);
}

TEST(ClipText, ForwardMatmulFlopsCountEveryGemmOfTheForward) {
  ClipTextModel model({.vocab_size = 50, .dim = 32, .ffn_dim = 37, .n_layers = 2, .n_heads = 4, .max_positions = 16});
  test::expect_forward_matmul_flops_counted(model, 50, 7);
}

TEST(ClipText, BadFoldersAndInputsAreClearErrors) {
  const fs::path original = clip_root("clip_eos2") / "model";
  const fs::path act = test::edited_copy(original, "clip_act", [](json& c) { c["hidden_act"] = "gelu_new"; });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(act), "hidden_act", "gelu_new", "quick_gelu");
  const fs::path whole = test::edited_copy(original, "clip_whole", [](json& c) { c["model_type"] = "clip"; });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(whole), "model_type", "\"clip\"", "clip_text_model");
  const fs::path eos = test::edited_copy(original, "clip_eos_list", [](json& c) {
    c["eos_token_id"] = {2, 3};
  });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(eos), "eos_token_id", "must be an integer");
  const fs::path heads = test::edited_copy(original, "clip_heads", [](json& c) { c["num_attention_heads"] = 5; });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(heads), "num_attention_heads (5) must divide hidden_size (32)");
  const fs::path wide =
      test::edited_copy(original, "clip_wide", [](json& c) { c["intermediate_size"] = 40; });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(wide), "encoder.layers.0.mlp.fc1.weight", "f32[37, 32]",
                     "expected shape [40, 32]", "Nothing was loaded");
  const fs::path missing =
      test::with_tensors(original, "clip_missing", [](auto& t) { t.erase("final_layer_norm.bias"); });
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(missing), "missing tensor 'final_layer_norm.bias'", "[32]");
  EXPECT_TITAN_ERROR(train::flux::load_clip_text(clip_root("clip_eos2") / "projection"),
                     "text_projection.weight", "CLIPTextModelWithProjection");

  auto model = train::flux::load_clip_text(original);
  const autograd::NoGradGuard no_grad;
  EXPECT_TITAN_ERROR(model->forward(Tensor::zeros({1, 78}, {.dtype = kI64})), "78 token ids", "77");
  EXPECT_TITAN_ERROR(
      model->forward(Tensor::zeros({1, 5}, {.dtype = kI64}), Tensor::ones({1, 4}, {.dtype = kI64})),
      "attention mask", "i64[1, 4]");
  EXPECT_TITAN_ERROR(model->forward(Tensor::full({1, 5}, 100, {.dtype = kI64})), "100");
}

}  // namespace
}  // namespace titan
