// FLUX's transformer against diffusers' FluxTransformer2DModel (tests/parity/
// flux_transformer_reference.py): forward outputs, one rectified-flow training step's loss and
// every gradient, latent packing, both on-disk layouts and their refusals; the rectified-flow
// helpers and ops::cat on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/parity_fixture.h"
#include "support/test_util.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/gradcheck.h"
#include "titan/checkpoint/hf_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/autocast.h"
#include "titan/models/flux/model.h"
#include "titan/models/flux/state_dict_adapter.h"
#include "titan/ops/arith.h"
#include "titan/ops/cat.h"
#include "titan/ops/reduce.h"
#include "titan/train/flux/rectified_flow.h"
#include "titan/train/flux/transformer_folder.h"

namespace titan {
namespace {

namespace fs = std::filesystem;
namespace fm = models::flux;
namespace tf = train::flux;
using nlohmann::json;

fs::path reference_dir() {
  return test::parity_fixture("flux_transformer_reference.py", "flux_transformer", "packing.safetensors");
}

#define REQUIRE_REFERENCE(dir)                                              \
  const fs::path dir = reference_dir();                                     \
  if (dir.empty())                                                          \
  TITAN_MISSING_REFERENCE(                                                  \
      "tests/parity/flux_transformer_reference.py failed (is diffusers in " \
      "the venv? run make deps-test)")

nn::StateDict read(const fs::path& file) {
  return checkpoint::read_safetensors(file.string()).tensors;
}

struct Case {
  const char* name;
  int64_t patch;  // the packing of the case's tokens
};
const Case kCases[] = {{"tiny", 1}, {"tiny_guidance", 1}, {"deep", 2}};

fm::FluxInputs inputs(const nn::StateDict& ref, const Tensor& img, DType dtype) {
  fm::FluxInputs in;
  in.img = img.to(dtype);
  in.txt = ref.at("in.txt").to(dtype);
  in.y = ref.at("in.y").to(dtype);
  in.timesteps = ref.at("in.t");
  in.img_ids = ref.at("in.img_ids");
  in.txt_ids = ref.at("in.txt_ids");
  if (ref.count("in.guidance")) in.guidance = ref.at("in.guidance");
  return in;
}

TEST(FluxTransformer, ForwardMatchesDiffusers) {
  REQUIRE_REFERENCE(dir);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto model = tf::load_transformer_folder(dir / c.name / "diffusers", {}, c.patch);
    const nn::StateDict ref = read(dir / c.name / "reference.safetensors");
    EXPECT_EQ(model->args().guidance_embed, ref.count("in.guidance") == 1);
    const Tensor out = (*model)(inputs(ref, ref.at("in.img"), kF32));
    EXPECT_TRUE(test::tensors_close(out, ref.at("out.sample"), 1e-5, c.name));
    std::printf("[ measured ] %s forward: max relative error %.3g\n", c.name,
                test::max_rel_error(out, ref.at("out.sample")));
  }
}

// loss = flow_matching_loss(model(noisy_latents(x0, noise, t)), x0, noise) and d loss / d every
// parameter, against diffusers' model run in float64 throughout (the reference script lifts its
// f32 sinusoid and RoPE product; the RoPE cos/sin tables are f32 in both): titan in float64
// agrees to rounding (measured <= 3e-14), titan in float32 within 1e-3 of every gradient
// (measured <= 4e-4) and 1e-4 of the loss (measured 2.6e-5), most of which is the f32 sinusoid
// of 1000 t (of 1000 g: guidance 3.5 -> 3500) that titan computes as diffusers does.
void expect_training_step(const fs::path& dir, const Case& c, DType dtype, double loss_tol, double grad_tol) {
  auto model = tf::load_transformer_folder(dir / c.name / "diffusers", {.dtype = dtype}, c.patch);
  const nn::StateDict ref = read(dir / c.name / "reference.safetensors");
  const Tensor x0 = ref.at("in.x0").to(dtype), noise = ref.at("in.noise").to(dtype);
  const Tensor xt = tf::noisy_latents(x0, noise, ref.at("in.t"));
  const Tensor loss = tf::flow_matching_loss((*model)(inputs(ref, xt, dtype)), x0, noise);
  loss.backward();
  const double want = ref.at("train.loss").to_vector<double>()[0];
  const double got = loss.to(kF64).to_vector<double>()[0];
  EXPECT_NEAR(got, want, loss_tol * std::abs(want));
  nn::StateDict grads;
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    grads.emplace(name, p.grad());
  }
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, g] : fm::to_diffusers(grads, model->args())) {
    const Tensor& r = ref.at("grad." + name);
    EXPECT_TRUE(test::tensors_close(g.to(kF64), r, grad_tol, name));
    const double e = test::max_rel_error(g.to(kF64), r);
    if (e > worst) worst = e, worst_name = name;
  }
  std::printf("[ measured ] %s %s: loss %.17g vs %.17g, worst gradient %s at %.3g\n", c.name,
              dtype == kF64 ? "f64" : "f32", got, want, worst_name.c_str(), worst);
}

TEST(FluxTransformer, TrainingStepLossAndEveryGradientMatchDiffusers) {
  REQUIRE_REFERENCE(dir);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    expect_training_step(dir, c, kF64, 1e-12, 1e-9);
    expect_training_step(dir, c, kF32, 1e-4, 1e-3);
  }
}

TEST(FluxTransformer, PackingMatchesFluxPipeline) {
  REQUIRE_REFERENCE(dir);
  const nn::StateDict ref = read(dir / "packing.safetensors");
  const Tensor latents = ref.at("latents");  // [2, 4, 6, 8]
  const Tensor packed = fm::pack_latents(latents, 2);
  EXPECT_TRUE(test::same_bits(packed.contiguous(), ref.at("packed")));
  EXPECT_TRUE(test::same_bits(fm::unpack_latents(packed, 6, 8, 2).contiguous(), ref.at("unpacked")));
  EXPECT_TRUE(test::same_bits(fm::image_ids(6, 8, 2), ref.at("image_ids")));
  EXPECT_TRUE(test::same_bits(fm::text_ids(3), Tensor::zeros({3, 3})));
  EXPECT_TITAN_ERROR(fm::pack_latents(latents, 4), "patch size 4");
}

TEST(FluxTransformer, DiffusersFolderRoundTripIsBitIdentical) {
  REQUIRE_REFERENCE(dir);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto model = tf::load_transformer_folder(dir / c.name / "diffusers", {}, c.patch);
    const fs::path out = test::fresh_temp_dir(std::string("flux_diffusers_") + c.name) / "copy";
    tf::save_transformer_folder(out, *model);
    test::expect_same_state(read(out / checkpoint::kDiffusersWeightsFile),
                            read(dir / c.name / "diffusers" / checkpoint::kDiffusersWeightsFile));
    test::expect_same_state(tf::load_transformer_folder(out, {}, c.patch)->state_dict(), model->state_dict());
    const json original = json::parse(std::ifstream(dir / c.name / "diffusers" / "config.json"));
    const json written = json::parse(std::ifstream(out / "config.json"));
    for (const auto& [key, value] : written.items()) EXPECT_EQ(value, original.at(key)) << key;
  }
}

TEST(FluxTransformer, BflFileLoadsTheSameModelAndRoundTripsBitIdentical) {
  REQUIRE_REFERENCE(dir);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto diffusers = tf::load_transformer_folder(dir / c.name / "diffusers", {}, c.patch);
    auto bfl = tf::load_bfl_transformer(dir / c.name / "bfl.safetensors", diffusers->args());
    test::expect_same_state(bfl->state_dict(), diffusers->state_dict());
    const fs::path out = test::fresh_temp_dir(std::string("flux_bfl_") + c.name) / "flux.safetensors";
    tf::save_bfl_transformer(out, *bfl);
    test::expect_same_state(read(out), read(dir / c.name / "bfl.safetensors"));
    // And back through diffusers' names, bit for bit.
    test::expect_same_state(fm::from_diffusers(fm::to_diffusers(bfl->state_dict(), bfl->args()), bfl->args()),
                            bfl->state_dict());
  }
}

TEST(FluxTransformer, WrongMissingAndUnexpectedTensorsAreRefusedByName) {
  REQUIRE_REFERENCE(dir);
  auto model = tf::load_transformer_folder(dir / "deep" / "diffusers", {}, 2);
  const fm::FluxModelArgs& a = model->args();
  nn::StateDict d = fm::to_diffusers(model->state_dict(), a);
  d["transformer_blocks.1.attn.to_k.weight"] = Tensor::zeros({32, 31});
  d.erase("norm_out.linear.bias");
  d["transformer_blocks.1.attn.extra"] = Tensor::zeros({2});
  EXPECT_TITAN_ERROR(fm::from_diffusers(d, a), "transformer_blocks.1.attn.to_k.weight", "[32, 31]",
                     "[32, 32]", "missing tensor 'norm_out.linear.bias'",
                     "unexpected tensor 'transformer_blocks.1.attn.extra'");

  const fs::path tmp = test::fresh_temp_dir("flux_wrong_shape");
  nn::StateDict bfl = model->state_dict();
  bfl["single_blocks.0.linear1.weight"] = Tensor::zeros({160, 32});
  checkpoint::write_safetensors((tmp / "bad.safetensors").string(), bfl, {{"format", "pt"}}, false);
  EXPECT_TITAN_ERROR(tf::load_bfl_transformer(tmp / "bad.safetensors", a), "bad.safetensors",
                     "single_blocks.0.linear1.weight", "[160, 32]", "[224, 32]");
  bfl = model->state_dict();
  bfl.erase("guidance_in.in_layer.weight");
  EXPECT_TITAN_ERROR(fm::from_bfl(bfl, a), "missing tensor 'guidance_in.in_layer.weight'");
}

TEST(FluxTransformer, DiffusersConfigMapsBothWaysAndRefusesWhatItCannotCompute) {
  REQUIRE_REFERENCE(dir);
  const json config = json::parse(std::ifstream(dir / "deep" / "diffusers" / "config.json"));
  const fm::FluxModelArgs a = fm::parse_diffusers_config(config, "config.json", 2);
  EXPECT_EQ(a.hidden_size, 32);
  EXPECT_EQ(a.num_heads, 2);
  EXPECT_EQ(a.depth, 2);
  EXPECT_EQ(a.depth_single_blocks, 2);
  EXPECT_EQ(a.in_channels, 16);
  EXPECT_EQ(a.latent_channels, 4);
  EXPECT_EQ(a.axes_dim, (std::vector<int64_t>{4, 4, 8}));
  EXPECT_TRUE(a.guidance_embed);
  const fm::FluxModelArgs back = fm::parse_diffusers_config(fm::to_diffusers_config(a), "again", 2);
  EXPECT_EQ(fm::to_diffusers_config(back), fm::to_diffusers_config(a));

  json c = config;
  c["patch_size"] = 2;
  EXPECT_TITAN_ERROR(fm::parse_diffusers_config(c, "config.json"), "patch_size", "proj_out");
  c = config;
  c["out_channels"] = 8;
  EXPECT_TITAN_ERROR(fm::parse_diffusers_config(c, "config.json"), "out_channels", "in_channels");
  c = config;
  c["axes_dims_rope"] = {4, 4, 4};
  EXPECT_TITAN_ERROR(fm::parse_diffusers_config(c, "config.json"), "axes_dim", "16");
  c = config;
  c["qk_norm"] = "rms_norm";
  EXPECT_TITAN_ERROR(fm::parse_diffusers_config(c, "config.json"), "qk_norm");
  EXPECT_TITAN_ERROR(fm::parse_diffusers_config(config, "config.json", 3), "packing patch 3");
}

TEST(FluxTransformer, Bf16AutocastStaysCloseToFloat32) {
  TITAN_SKIP_WITHOUT_BF16();
  REQUIRE_REFERENCE(dir);
  auto model = tf::load_transformer_folder(dir / "deep" / "diffusers", {}, 2);
  const nn::StateDict ref = read(dir / "deep" / "reference.safetensors");
  Tensor out;
  {
    AutocastGuard autocast(kBF16);
    out = (*model)(inputs(ref, ref.at("in.img"), kF32));
  }
  EXPECT_EQ(out.dtype(), kF32);
  const double err = test::max_rel_error(out, ref.at("out.sample"));
  std::printf("[ measured ] deep bf16 autocast forward: max relative error %.3g\n", err);
  EXPECT_LT(err, 5e-2);
  EXPECT_GT(err, 1e-6);  // the products did run in bf16
}

TEST(FluxTransformer, FlavorsBuildAndTheSummaryCountsTheirParameters) {
  for (const std::string& name : fm::flux_flavors()) fm::flux_flavor(name).validate();
  EXPECT_TITAN_ERROR(fm::flux_flavor("flux-pro"), "flux-pro", "flux-dev", "flux-tiny");
  const fm::FluxModelArgs& tiny = fm::flux_flavor("flux-tiny");
  fm::FluxTransformer model(tiny);
  EXPECT_EQ(fm::flux_summary(tiny, 64, 16).num_params, model.num_parameters());
  // FLUX.1-dev's published transformer: 11,901,408,320 parameters; schnell lacks guidance_in.
  EXPECT_EQ(fm::flux_summary(fm::flux_flavor("flux-dev"), 4096, 512).num_params, 11901408320);
  const fm::FluxSummary s = fm::flux_summary(fm::flux_flavor("flux-schnell"), 4096, 512);
  EXPECT_EQ(s.num_params, 11901408320 - (256 * 3072 + 3072 + 3072 * 3072 + 3072));
  // 6 x params x tokens, counted from the tensors' names: a double block's stream weights see only
  // their stream's tokens (half of the block's weights per token), and the modulations and
  // embedders one vector per sample; plus 12 x blocks x hidden x tokens^2 for attention.
  double per_token = 0;
  for (const auto& [name, shape] : fm::shapes(fm::flux_flavor("flux-schnell"))) {
    const double n = static_cast<double>(numel_of(shape));
    if (name.find("_mod.") != std::string::npos || name.find("modulation") != std::string::npos ||
        name.starts_with("time_in") || name.starts_with("vector_in"))
      continue;
    per_token += name.starts_with("double_blocks") ? n / 2 : n;
  }
  const double rough = 6.0 * per_token * 4608 + 12.0 * 57 * 3072 * 4608.0 * 4608.0;
  EXPECT_NEAR(s.flops_per_sample / rough, 1.0, 0.01);
  EXPECT_NE(s.description.find("19 double + 38 single"), std::string::npos) << s.description;
}

// The blocks are modules that activation checkpointing (and FSDP) can wrap: checkpointing every
// block gives bit-identical gradients, the conditioning vector's included.
TEST(FluxTransformer, CheckpointedBlocksGiveTheSameGradients) {
  fm::FluxModelArgs a = fm::flux_flavor("flux-tiny");
  a.hidden_size = 64;
  a.num_heads = 2;
  fm::FluxTransformer model(a);
  Generator gen(3);
  model.init_weights(gen);
  std::vector<std::string> names;
  for (const auto& [name, m] : model.named_modules()) names.push_back(name);
  for (const char* want : {"double_blocks.0", "double_blocks.1", "single_blocks.0", "single_blocks.1"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;

  fm::FluxInputs in;
  in.img = Tensor::randn({2, 16, a.in_channels}, gen);
  in.img_ids = fm::image_ids(8, 8, a.patch_size);
  in.txt = Tensor::randn({2, 7, a.context_in_dim}, gen);
  in.txt_ids = fm::text_ids(7);
  in.timesteps = Tensor::rand({2}, gen);
  in.y = Tensor::randn({2, a.vec_in_dim}, gen);
  auto gradients = [&] {
    model.zero_grad();
    ops::mean(ops::square(model(in))).backward();
    nn::StateDict g;
    for (const auto& [name, p] : model.named_parameters()) g.emplace(name, p.grad().clone());
    return g;
  };
  const nn::StateDict plain = gradients();
  for (auto& [name, m] : model.named_modules())
    if (name.starts_with("double_blocks.") || name.starts_with("single_blocks."))
      m->set_forward_wrapper(
          [](const nn::Module::ForwardBody& body, const Tensor& x) { return autograd::checkpoint(body, x); });
  test::expect_same_state(gradients(), plain);
}

TEST(RectifiedFlow, NoisyLatentsAndLossFollowTheirDefinitions) {
  const Tensor x0 = test::rand_f32({2, 3, 4}, 1), noise = test::rand_f32({2, 3, 4}, 2);
  const Tensor t = Tensor::from_vector<float>({0.25f, 1.0f}, {2});
  const std::vector<float> xt = tf::noisy_latents(x0, noise, t).to_vector<float>();
  const std::vector<float> a = x0.to_vector<float>(), b = noise.to_vector<float>();
  for (size_t i = 0; i < xt.size(); ++i) {
    const float ti = i < 12 ? 0.25f : 1.0f;
    EXPECT_NEAR(xt[i], (1 - ti) * a[i] + ti * b[i], 1e-6) << i;
  }
  const Tensor pred = test::rand_f32({2, 3, 4}, 3);
  const std::vector<float> p = pred.to_vector<float>();
  double want = 0;
  for (size_t i = 0; i < p.size(); ++i)
    want += std::pow(p[i] - (b[i] - a[i]), 2) / static_cast<double>(p.size());
  EXPECT_NEAR(tf::flow_matching_loss(pred, x0, noise).to_vector<float>()[0], want, 1e-6);
  EXPECT_TITAN_ERROR(tf::noisy_latents(x0, noise, Tensor::zeros({3})), "t must be [B] with B = 2");
}

TEST(RectifiedFlow, TimestepSamplersHaveTheirLawsAndAreDeterministic) {
  constexpr int64_t n = 20000;
  Generator g1(5), g2(5);
  const std::vector<float> u = tf::sample_timesteps_uniform(n, g1).to_vector<float>();
  EXPECT_EQ(u, tf::sample_timesteps_uniform(n, g2).to_vector<float>());
  double mean = 0;
  for (float v : u) {
    ASSERT_TRUE(v >= 0 && v < 1);
    mean += v / n;
  }
  EXPECT_NEAR(mean, 0.5, 0.01);

  Generator g3(6), g4(6);
  std::vector<float> ln = tf::sample_timesteps_logit_normal(n, g3).to_vector<float>();
  EXPECT_EQ(ln, tf::sample_timesteps_logit_normal(n, g4).to_vector<float>());
  auto median = [](std::vector<float> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  EXPECT_NEAR(median(ln), 0.5, 0.01);
  // logit(t) ~ N(mean, std): its sample standard deviation.
  double s2 = 0;
  for (float v : ln) s2 += std::pow(std::log(v / (1 - v)), 2) / n;
  EXPECT_NEAR(std::sqrt(s2), 1.0, 0.02);
  // The shift is monotonic, so the median moves to the shifted median: 3 * 0.5 / (1 + 2 * 0.5).
  Generator g5(6);
  const std::vector<float> shifted =
      tf::sample_timesteps_logit_normal(n, g5, 0.0, 1.0, 3.0).to_vector<float>();
  EXPECT_NEAR(median(shifted), 0.75, 0.01);
  for (size_t i = 0; i < 100; ++i) EXPECT_NEAR(shifted[i], tf::time_shift(ln[i], 3.0), 1e-6);
  EXPECT_DOUBLE_EQ(tf::time_shift(0.3, 1.0), 0.3);
}

TEST(OpsCat, JoinsAlongAnyDimAndGradchecks) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}),
               b = Tensor::from_vector<float>({5, 6}, {2, 1});
  EXPECT_EQ(ops::cat({a, b}, 1).to_vector<float>(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(ops::cat({a, b.reshape({1, 2})}, 0).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TITAN_ERROR(ops::cat({a, b}, 0), "differ in dim 1");
  const Tensor x = test::rand_f64({2, 3, 4}, 1), y = test::rand_f64({2, 1, 4}, 2),
               z = test::rand_f64({2, 2, 4}, 3);
  for (int64_t dim : {1, -2}) {
    const auto res = autograd::gradcheck(
        [dim](const std::vector<Tensor>& v) { return std::vector<Tensor>{ops::cat(v, dim)}; }, {x, y, z});
    EXPECT_TRUE(res.ok) << res.message;
  }
}

}  // namespace
}  // namespace titan
