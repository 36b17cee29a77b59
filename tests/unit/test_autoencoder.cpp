// FLUX's autoencoder (diffusers' AutoencoderKL) against diffusers: outputs of a tiny seeded model
// (tests/parity/autoencoder_reference.py), both on-disk layouts, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/parity_fixture.h"
#include "support/test_util.h"
#include "titan/autograd/gradcheck.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/autoencoder/model.h"
#include "titan/models/autoencoder/state_dict_adapter.h"
#include "titan/nn/conv2d.h"
#include "titan/nn/group_norm.h"
#include "titan/ops/arith.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/group_norm.h"
#include "titan/train/flux/autoencoder_folder.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
namespace ae = models::autoencoder;
using nlohmann::json;

constexpr double kTol = 1e-5;

fs::path reference_dir() {
  return test::parity_fixture("autoencoder_reference.py", "autoencoder", "reference.safetensors");
}

#define REQUIRE_REFERENCE(dir)                                         \
  const fs::path dir = reference_dir();                                \
  if (dir.empty())                                                     \
  TITAN_MISSING_REFERENCE(                                             \
      "tests/parity/autoencoder_reference.py failed (is diffusers in " \
      "the venv? run make deps-test)")

nn::StateDict read(const fs::path& file) {
  return checkpoint::read_safetensors(file.string()).tensors;
}

void expect_matches_reference(ae::Autoencoder& model, const nn::StateDict& ref) {
  const ae::DiagonalGaussian d = model.encode_distribution(ref.at("in.image"));
  EXPECT_TRUE(test::tensors_close(d.mean, ref.at("out.mean"), kTol, "mean"));
  EXPECT_TRUE(test::tensors_close(d.logvar, ref.at("out.logvar"), kTol, "logvar"));
  EXPECT_TRUE(test::tensors_close(model.decode_z(ref.at("in.z")), ref.at("out.decoded"), kTol, "decoded"));
}

TEST(Autoencoder, EncoderAndDecoderMatchDiffusers) {
  REQUIRE_REFERENCE(dir);
  auto model = train::flux::load_autoencoder_folder(dir / "diffusers");
  EXPECT_EQ(model->args().block_out_channels, (std::vector<int64_t>{32, 64}));
  expect_matches_reference(*model, read(dir / "reference.safetensors"));
}

TEST(Autoencoder, LatentsAreTheShiftedScaledSample) {
  REQUIRE_REFERENCE(dir);
  auto model = train::flux::load_autoencoder_folder(dir / "diffusers");
  const nn::StateDict ref = read(dir / "reference.safetensors");
  const Tensor image = ref.at("in.image");
  const ae::DiagonalGaussian d = model->encode_distribution(image);
  const double shift = 0.1159, scale = 0.3611;
  EXPECT_TRUE(test::tensors_close(model->encode_mean(image), (d.mean - shift) * scale, 1e-6, "encode_mean"));
  // The noise is the generator's standard normal stream, drawn once per element.
  Generator gen(7), same(7);
  const Tensor noise = Tensor::randn(d.mean.sizes(), same);
  EXPECT_TRUE(test::tensors_close(model->encode(image, gen), (d.mean + d.stddev() * noise - shift) * scale,
                                  1e-6, "encode"));
  EXPECT_EQ(gen.offset(), same.offset());
  const Tensor latents = (ref.at("in.z") - shift) * scale;
  EXPECT_TRUE(test::tensors_close(model->decode(latents), ref.at("out.decoded"), kTol, "decode"));
}

TEST(Autoencoder, LogVarianceIsClampedAsDiffusersClampsIt) {
  // Channels 0-1 are the mean (never clamped), 2-3 the log-variance.
  const Tensor moments = Tensor::from_vector<float>({-50, 2, 3, 50, -50, 50, -29, 19}, {1, 4, 1, 2});
  const ae::DiagonalGaussian d(moments);
  EXPECT_EQ(d.mean.contiguous().to_vector<float>(), (std::vector<float>{-50, 2, 3, 50}));
  EXPECT_EQ(d.logvar.contiguous().to_vector<float>(), (std::vector<float>{-30, 20, -29, 19}));
}

TEST(Autoencoder, DiffusersFolderRoundTripIsBitIdentical) {
  REQUIRE_REFERENCE(dir);
  auto model = train::flux::load_autoencoder_folder(dir / "diffusers");
  const fs::path out = test::fresh_temp_dir("autoencoder_diffusers") / "copy";
  train::flux::save_autoencoder_folder(out, *model);
  test::expect_same_state(read(out / checkpoint::kDiffusersWeightsFile),
                          read(dir / "diffusers" / checkpoint::kDiffusersWeightsFile));
  test::expect_same_state(train::flux::load_autoencoder_folder(out)->state_dict(), model->state_dict());
  const json original = json::parse(std::ifstream(dir / "diffusers" / "config.json"));
  const json written = json::parse(std::ifstream(out / "config.json"));
  for (const auto& [key, value] : written.items()) EXPECT_EQ(value, original.at(key)) << key;
}

TEST(Autoencoder, BflFileLoadsTheSameModelAndRoundTripsBitIdentical) {
  REQUIRE_REFERENCE(dir);
  auto diffusers = train::flux::load_autoencoder_folder(dir / "diffusers");
  auto bfl = train::flux::load_bfl_autoencoder(dir / "ae.safetensors", diffusers->args());
  test::expect_same_state(bfl->state_dict(), diffusers->state_dict());
  expect_matches_reference(*bfl, read(dir / "reference.safetensors"));

  const fs::path out = test::fresh_temp_dir("autoencoder_bfl") / "ae.safetensors";
  train::flux::save_bfl_autoencoder(out, *bfl);
  test::expect_same_state(read(out), read(dir / "ae.safetensors"));
  test::expect_same_state(train::flux::load_bfl_autoencoder(out, bfl->args())->state_dict(),
                          bfl->state_dict());
}

TEST(Autoencoder, AWrongShapeIsRefusedNamingTheTensorAndBothShapes) {
  REQUIRE_REFERENCE(dir);
  auto model = train::flux::load_autoencoder_folder(dir / "diffusers");
  const fs::path tmp = test::fresh_temp_dir("autoencoder_wrong_shape");
  nn::StateDict state = model->state_dict();
  state["decoder.conv_in.weight"] = Tensor::zeros({64, 4, 1, 1});
  checkpoint::save_hf(tmp / "folder", ae::to_diffusers_config(model->args()), state, kF32, {},
                      checkpoint::kDiffusersWeightsFile);
  EXPECT_TITAN_ERROR(train::flux::load_autoencoder_folder(tmp / "folder"), "decoder.conv_in.weight",
                     "[64, 4, 1, 1]", "[64, 4, 3, 3]");

  nn::StateDict bfl = read(dir / "ae.safetensors");
  bfl["encoder.mid.attn_1.q.weight"] = Tensor::zeros({64, 64});
  checkpoint::write_safetensors((tmp / "ae.safetensors").string(), bfl);
  EXPECT_TITAN_ERROR(train::flux::load_bfl_autoencoder(tmp / "ae.safetensors", model->args()),
                     "ae.safetensors", "encoder.mid.attn_1.q.weight", "[64, 64]", "[64, 64, 1, 1]");
}

json tiny_config() {
  return {{"_class_name", "AutoencoderKL"},
          {"block_out_channels", {32, 64}},
          {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
          {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
          {"latent_channels", 4},
          {"sample_size", 32}};
}

TEST(Autoencoder, ConfigRefusesWhatTheModelCannotRepresent) {
  // diffusers' defaults: both quant convolutions, no shift.
  const ae::ModelArgs a = ae::parse_diffusers_config(tiny_config(), "config.json");
  EXPECT_TRUE(a.use_quant_conv && a.use_post_quant_conv);
  EXPECT_EQ(a.shift_factor, 0.0);
  EXPECT_EQ(a.layers_per_block, 1);
  EXPECT_TRUE(ae::shapes(a).count("quant_conv.weight"));
  EXPECT_TITAN_ERROR(ae::bfl_shapes(a), "quant_conv");

  json c = tiny_config();
  c["down_block_types"][1] = "AttnDownEncoderBlock2D";
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "down_block_types",
                     "AttnDownEncoderBlock2D");
  c = tiny_config();
  c["up_block_types"] = {"UpDecoderBlock2D"};
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "up_block_types",
                     "one block type per level");
  c = tiny_config();
  c["act_fn"] = "gelu";
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "act_fn", "silu");
  c = tiny_config();
  c["latents_mean"] = {0.1, 0.2, 0.3, 0.4};
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "latents_mean");
  c = tiny_config();
  c["use_tiling"] = true;
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "use_tiling");
  c = tiny_config();
  c["norm_num_groups"] = 24;
  EXPECT_TITAN_ERROR(ae::parse_diffusers_config(c, "config.json"), "norm_num_groups");
}

TEST(Autoencoder, FluxFlavorHasFluxsSizes) {
  const ae::ModelArgs a = ae::flavor("flux");
  EXPECT_EQ(to_diffusers_config(a)["block_out_channels"], json({128, 256, 512, 512}));
  EXPECT_EQ(a.downscale(), 8);
  int64_t params = 0;
  for (const auto& [name, shape] : ae::shapes(a)) params += numel_of(shape);
  EXPECT_EQ(params, 83819683);  // diffusers' AutoencoderKL of FLUX.1's vae/config.json
  EXPECT_EQ(ae::shapes(a).size(), 244u);
  const auto bfl = ae::bfl_shapes(a);
  EXPECT_EQ(bfl.size(), 244u);
  EXPECT_EQ(bfl.at("decoder.up.3.block.0.conv1.weight"), (Shape{512, 512, 3, 3}));
  EXPECT_EQ(bfl.at("decoder.up.0.block.0.nin_shortcut.weight"), (Shape{128, 256, 1, 1}));
  EXPECT_EQ(bfl.at("decoder.up.1.upsample.conv.weight"), (Shape{256, 256, 3, 3}));
  EXPECT_EQ(bfl.at("encoder.mid.attn_1.proj_out.weight"), (Shape{512, 512, 1, 1}));
  EXPECT_TITAN_ERROR(ae::flavor("sd"), "flux");
}

TEST(Autoencoder, BlocksGradientsMatchFiniteDifferences) {
  const TensorOptions f64{.dtype = kF64};
  Generator gen(3);
  ae::ResnetBlock resnet(4, 6, 2, f64);
  ae::MidAttention attention(4, 2, f64);
  resnet.init_weights(gen);
  attention.init_weights(gen);
  const Tensor x = test::rand_f64({2, 4, 3, 3}, 5);
  auto res = autograd::gradcheck(
      [&](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{resnet(v[0]), attention(v[0])};
      },
      {x});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(NnConv2d, ForwardIsTheOpAndInitIsPyTorchsBound) {
  nn::Conv2d conv(3, 5, 3, 2, 1);
  Generator gen(1);
  conv.init_weights(gen);
  const double bound = 1.0 / std::sqrt(27.0);
  for (const Tensor& t : {conv.weight, conv.bias})
    for (float v : t.to_vector<float>()) EXPECT_LE(std::abs(v), bound);
  EXPECT_EQ(conv.weight.sizes(), (Shape{5, 3, 3, 3}));
  const Tensor x = test::rand_f32({2, 3, 7, 6}, 2);
  const Tensor y = conv(x);
  EXPECT_EQ(y.sizes(), (Shape{2, 5, 4, 3}));
  EXPECT_TRUE(test::same_bits(
      y, ops::conv2d(x, conv.weight, conv.bias,
                     {.stride = 2, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1})));
  EXPECT_FALSE(nn::Conv2d(3, 5, 1, 1, 0, false).bias.defined());
  EXPECT_TITAN_ERROR(nn::Conv2d(3, 5, 0), "kernel=0");
}

TEST(NnGroupNorm, ForwardIsTheOpWithUnitWeightAndZeroBias) {
  nn::GroupNorm norm(2, 4, 1e-6);
  EXPECT_EQ(norm.weight.to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(norm.bias.to_vector<float>(), std::vector<float>(4, 0.0f));
  const Tensor x = test::rand_f32({2, 4, 3, 3}, 3);
  EXPECT_TRUE(test::same_bits(norm(x), ops::group_norm(x, 2, norm.weight, norm.bias, 1e-6)));
  EXPECT_FALSE(nn::GroupNorm(2, 4, 1e-6, false).weight.defined());
  EXPECT_TITAN_ERROR(nn::GroupNorm(3, 4), "groups=3", "channels=4");
}

}  // namespace
}  // namespace titan
