// FLUX text to image against diffusers' FluxPipeline (tests/parity/flux_pipeline_reference.py):
// the same tiny seeded T5, CLIP, autoencoder and transformer, the same injected latents, 4 steps;
// the images (output_type "pt", before 8-bit rounding) within 1e-4, without guidance, with
// two-pass classifier-free guidance, with a guidance-distilled transformer and with FLUX.1-schnell's
// unshifted schedule.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "support/hf_tokenizer.h"
#include "support/paths.h"
#include "support/test_util.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/file_lock.h"
#include "titan/data/image/image_io.h"
#include "titan/train/flux/pipeline.h"
#include "titan/train/flux/transformer_folder.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// The script's output, made when missing or older than the script (or than the folder builder it
// shares with flux_encode_reference.py); empty when it cannot run. Several tests read it and ctest
// runs them in parallel processes, so one makes it while the others wait on a lock.
fs::path flux_pipeline_reference() {
  const fs::path out = fs::path(TITAN_PARITY_DIR) / "flux_pipeline";
  const fs::path parity = fs::path(TITAN_SOURCE_DIR) / "tests" / "parity";
  fs::create_directories(TITAN_PARITY_DIR);
  std::optional<FolderLock> lock;
  while (!(lock = FolderLock::try_lock(TITAN_PARITY_DIR, "flux_pipeline.lock")))
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
      {"out.schnell",
       false,
       {.width = 64, .height = 64, .sampling = {.steps = 4, .schedule = load_flow_schedule(ref / "scheduler_schnell")}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // diffusers' folders, read by titan's loader: the pipeline packs 2x2 patches.
    ImagePipeline pipeline(conditioning, load_transformer_folder(c.guidance_model ? ref / "transformer_guidance"
                                                                                  : ref / "pipeline" / "transformer"));
    ASSERT_EQ(pipeline.transformer().args().guidance_embed, c.guidance_model);
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

TEST(FluxGenerate, WritesTheGridTheLibraryMakes) {
  const fs::path ref = flux_pipeline_reference();
  if (ref.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_pipeline_reference.py did not run (make deps-test)");
  const fs::path dir = test::fresh_temp_dir("flux_generate"), out = dir / "grid.png";
  const test::CliRun run = test::run_titan({"generate", "--pipeline", (ref / "pipeline").string(), "--prompt",
                                            kPrompts[0], "--prompt", kPrompts[1], "--images-per-prompt", "3",
                                            "--width", "48", "--height", "32", "--steps", "2", "--seed", "7",
                                            "--cfg-scale", "2.5", "--negative-prompt", "blurry", "--t5-length", "32",
                                            "--out", out.string()},
                                           dir);
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("6 images of 48x32 in 2 steps (two passes each)"), std::string::npos) << run.err;
  // A row per prompt, a column per image.
  const data::Image grid = data::read_image(out);
  ASSERT_EQ(grid.width, 3 * 48);
  ASSERT_EQ(grid.height, 2 * 32);

  ImagePipeline pipeline(std::make_shared<ConditioningStack>(ConditioningPaths::of_pipeline(ref / "pipeline"), 32),
                         load_transformer_folder(ref / "pipeline" / "transformer"));
  const ImageOptions options{.width = 48,
                             .height = 32,
                             .images_per_prompt = 3,
                             .seed = 7,
                             .negative_prompt = "blurry",
                             .sampling = {.steps = 2, .cfg_scale = 2.5}};
  const Tensor images = pipeline.generate(kPrompts, options);
  EXPECT_TRUE(grid == image_grid(images, 3)) << "the command's PNG is not the library's grid";
  // Each image has noise of its own.
  EXPECT_FALSE(test::same_bits(images.narrow(0, 0, 1), images.narrow(0, 1, 1)));
}

TEST(FluxGenerate, WritesEachImageBesideItsCaption) {
  const fs::path ref = flux_pipeline_reference();
  if (ref.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_pipeline_reference.py did not run (make deps-test)");
  const fs::path dir = test::fresh_temp_dir("flux_generate_each");
  fs::create_directories(dir / "captions");
  // Out of name order on purpose, one with an editor's newline, and a file that is not a caption.
  std::ofstream(dir / "captions" / "b.txt") << kPrompts[1] << "\n";
  std::ofstream(dir / "captions" / "a.txt") << kPrompts[0];
  std::ofstream(dir / "captions" / "a.png") << "not read";
  const test::CliRun run = test::run_titan({"generate", "--pipeline", (ref / "pipeline").string(), "--prompts-from",
                                            (dir / "captions").string(), "--out-dir", (dir / "out").string(),
                                            "--width", "32", "--height", "32", "--steps", "2", "--t5-length", "32"},
                                           dir);
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  ImagePipeline pipeline(std::make_shared<ConditioningStack>(ConditioningPaths::of_pipeline(ref / "pipeline"), 32),
                         load_transformer_folder(ref / "pipeline" / "transformer"));
  const Tensor images = pipeline.generate(kPrompts, {.width = 32, .height = 32, .sampling = {.steps = 2}});
  for (int64_t i = 0; i < 2; ++i) {
    const std::string stem = i == 0 ? "a" : "b";
    EXPECT_TRUE(data::read_image(dir / "out" / (stem + ".png")) == image_grid(images.narrow(0, i, 1), 1)) << stem;
    std::ifstream in(dir / "out" / (stem + ".txt"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), kPrompts[i]);
  }
}

TEST(FluxGenerate, RefusesOptionsItCannotUse) {
  const fs::path ref = flux_pipeline_reference();
  if (ref.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_pipeline_reference.py did not run (make deps-test)");
  const fs::path dir = test::fresh_temp_dir("flux_generate_refusals");
  const std::vector<std::string> base = {"generate", "--pipeline", (ref / "pipeline").string(), "--prompt", "x",
                                         "--t5-length", "32", "--steps", "1"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--out", (dir / "a.gif").string()}, "--out"},
      {{"--out", (dir / "a.png").string(), "--negative-prompt", "y"}, "--cfg-scale above 1"},
      {{"--out", (dir / "a.png").string(), "--cfg-scale", "0.5"}, "--cfg-scale must be at least 1"},
      {{"--out", (dir / "a.png").string(), "--steps", "0"}, "--steps must be at least 1"},
      {{"--out", (dir / "a.png").string(), "--guidance", "4"}, "--guidance"},
      {{"--out", (dir / "a.png").string(), "--width", "30"}, "--width 30 is not a positive multiple of 4"},
      {{"--out", (dir / "a.png").string(), "--temperature", "1"}, "unknown argument '--temperature'"},
      {{"--prompt", "y"}, "needs --pipeline, at least one --prompt (or --prompts-from) and --out or --out-dir"},
      {{"--out", (dir / "a.png").string(), "--prompts-from", (dir / "none").string()}, "is not a folder"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const test::CliRun run = test::run_titan(args, dir);
    EXPECT_EQ(run.rc, 1) << message;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
  EXPECT_FALSE(fs::exists(dir / "a.png"));

  // A scheduler the sampler does not implement is refused before anything is loaded.
  fs::copy(ref / "pipeline", dir / "pipeline", fs::copy_options::recursive);
  std::ofstream(dir / "pipeline" / "scheduler" / "scheduler_config.json")
      << R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "use_karras_sigmas": true})";
  std::vector<std::string> args = base;
  args[2] = (dir / "pipeline").string();
  args.insert(args.end(), {"--out", (dir / "a.png").string()});
  const test::CliRun run = test::run_titan(args, dir);
  EXPECT_EQ(run.rc, 1);
  EXPECT_NE(run.err.find("use_karras_sigmas is true"), std::string::npos) << run.err;
}

TEST(FluxGenerate, ReadsTheTransformerOfATrainingCheckpoint) {
  const fs::path ref = flux_pipeline_reference();
  if (ref.empty()) TITAN_MISSING_REFERENCE("tests/parity/flux_pipeline_reference.py did not run (make deps-test)");
  const fs::path dir = test::fresh_temp_dir("flux_generate_checkpoint");
  // A flux-tiny checkpoint as titan train names it: its weights load, and the pipeline's T5 (32
  // wide) is then refused for flux-tiny's context_in_dim.
  models::flux::FluxTransformer model(models::flux::flux_flavor("flux-tiny"));
  Generator gen(0);
  model.reset_parameters(gen);
  checkpoint::Pieces pieces;
  for (const auto& [name, t] : model.state_dict()) pieces["model." + name] = checkpoint::whole(t);
  checkpoint::save(dir / "ckpt" / "step-3", pieces,
                   {{"config", {{"model", {{"name", "flux"}, {"flavor", "flux-tiny"}}}}}});
  const test::CliRun run =
      test::run_titan({"generate", "--pipeline", (ref / "pipeline").string(), "--checkpoint", (dir / "ckpt").string(),
                       "--prompt", "x", "--t5-length", "32", "--width", "32", "--height", "32", "--steps", "1",
                       "--out", (dir / "a.png").string()},
                      dir);
  EXPECT_EQ(run.rc, 1);
  EXPECT_NE(run.err.find("context_in_dim " + std::to_string(model.args().context_in_dim)), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("titan: loaded " + (dir / "ckpt").string()), std::string::npos) << run.err;

  checkpoint::save(dir / "lm" / "step-1", pieces, {{"config", {{"model", {{"name", "llama3"}, {"flavor", "debug"}}}}}});
  const test::CliRun lm =
      test::run_titan({"generate", "--pipeline", (ref / "pipeline").string(), "--checkpoint", (dir / "lm").string(),
                       "--prompt", "x", "--out", (dir / "a.png").string()},
                      dir);
  EXPECT_EQ(lm.rc, 1);
  EXPECT_NE(lm.err.find("holds model llama3 flavor debug, not a FLUX flavor"), std::string::npos) << lm.err;
}

}  // namespace
}  // namespace titan::train::flux
