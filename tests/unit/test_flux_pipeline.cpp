// FLUX text to image against diffusers' FluxPipeline (tests/parity/flux_pipeline_reference.py):
// the same tiny seeded T5, CLIP, autoencoder and transformer, the same injected latents, 4 steps;
// the images (output_type "pt", before 8-bit rounding) within 1e-4, without guidance, with
// two-pass classifier-free guidance and with a guidance-distilled transformer.
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/hf_tokenizer.h"
#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/train/flux/pipeline.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// The script's output, made when missing or older than the script (or than the folder builder it
// shares with flux_encode_reference.py); empty when it cannot run.
fs::path flux_pipeline_reference() {
  const fs::path out = fs::path(TITAN_PARITY_DIR) / "flux_pipeline";
  const fs::path parity = fs::path(TITAN_SOURCE_DIR) / "tests" / "parity";
  const fs::path script = parity / "flux_pipeline_reference.py", reference = out / "reference.safetensors";
  if (!fs::exists(reference) || fs::last_write_time(reference) < fs::last_write_time(script) ||
      fs::last_write_time(reference) < fs::last_write_time(parity / "flux_encode_reference.py")) {
    const fs::path tokenizers = test::flux_tokenizer_fixture("clip").parent_path();
    const std::string cmd = std::string("'") + TITAN_PYTHON + "' '" + script.string() + "' --tokenizers '" +
                            tokenizers.string() + "' --out '" + out.string() + "' > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return {};
  }
  return out;
}

// The script's transformer: diffusers' tiny test shape with FLUX's 2x2 packing of 4 latent
// channels, and the T5 / CLIP widths of the folder (32).
models::flux::FluxModelArgs tiny_args(bool guidance) {
  models::flux::FluxModelArgs a;
  a.in_channels = 16;
  a.vec_in_dim = 32;
  a.context_in_dim = 32;
  a.hidden_size = 32;
  a.num_heads = 2;
  a.depth = 1;
  a.depth_single_blocks = 1;
  a.axes_dim = {4, 4, 8};
  a.guidance_embed = guidance;
  a.patch_size = 2;
  a.latent_channels = 4;
  return a;
}

std::shared_ptr<models::flux::FluxTransformer> load_transformer(const fs::path& bfl_file, bool guidance) {
  auto model = std::make_shared<models::flux::FluxTransformer>(tiny_args(guidance));
  model->load_state_dict(checkpoint::read_safetensors(bfl_file.string()).tensors);
  return model;
}

const std::vector<std::string> kPrompts = {"a red circle at the top left on a blue background",
                                           "a green square in the middle"};

TEST(FluxPipeline, ImagesMatchDiffusersFluxPipeline) {
  const fs::path ref = flux_pipeline_reference();
  if (ref.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_pipeline_reference.py did not run (make deps-test)");
  const checkpoint::SafetensorsFile expected = checkpoint::read_safetensors((ref / "reference.safetensors").string());
  auto conditioning = std::make_shared<ConditioningStack>(ConditioningPaths::of_pipeline(ref / "pipeline"), 32);
  struct Case {
    std::string name;
    bool guidance_model;
    ImageOptions options;
  };
  const std::vector<Case> cases = {
      {"out.plain", false, {.width = 64, .height = 64, .sampling = {.steps = 4}}},
      {"out.cfg",
       false,
       {.width = 64, .height = 64, .negative_prompt = "a yellow triangle", .sampling = {.steps = 4, .cfg_scale = 3.0}}},
      {"out.guidance", true, {.width = 64, .height = 64, .sampling = {.steps = 4, .guidance = 3.5}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ImagePipeline pipeline(conditioning,
                           load_transformer(ref / (c.guidance_model ? "transformer_guidance.safetensors"
                                                                    : "transformer.safetensors"),
                                            c.guidance_model));
    const Tensor images = pipeline.generate(kPrompts, c.options, expected.tensors.at("in.latents"));
    const Tensor& want = expected.tensors.at(c.name);
    ASSERT_EQ(images.sizes(), want.sizes());
    const double err = test::max_rel_error(images, want);
    std::cout << "[ flux pipeline ] " << c.name << ": max error " << err << " relative to diffusers (float64)\n";
    EXPECT_LT(err, 1e-4);
  }
}

TEST(FluxPipeline, GridLaysImagesOutInRows) {
  // Three images of 2 x 3 pixels, two to a row: the third starts the second row, whose second
  // place stays black.
  Tensor images = Tensor::zeros({3, 3, 2, 3});
  for (int64_t i = 0; i < 3; ++i) images.narrow(0, i, 1).fill_(0.25 * static_cast<double>(i + 1));
  images.narrow(0, 0, 1).narrow(1, 0, 1).narrow(2, 1, 1).narrow(3, 2, 1).fill_(1.5);  // clamped to 255
  const data::Image grid = image_grid(images, 2);
  ASSERT_EQ(grid.width, 6);
  ASSERT_EQ(grid.height, 4);
  EXPECT_EQ(grid.row(0)[0], 64);       // round(0.25 x 255)
  EXPECT_EQ(grid.row(1)[2 * 3], 255);  // image 0's (row 1, column 2), red
  EXPECT_EQ(grid.row(1)[2 * 3 + 1], 64);
  EXPECT_EQ(grid.row(0)[3 * 3], 128);  // image 1, round(127.5) away from zero
  EXPECT_EQ(grid.row(3)[2 * 3], 191);  // image 2
  EXPECT_EQ(grid.row(3)[5 * 3], 0);    // no fourth image
}

}  // namespace
}  // namespace titan::train::flux
