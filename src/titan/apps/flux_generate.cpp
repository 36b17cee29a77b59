#include "titan/apps/flux_generate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <iostream>
#include <memory>
#include <optional>

#include "titan/apps/args.h"
#include "titan/checkpoint/checkpoint.h"
#include "titan/core/error.h"
#include "titan/data/image/image_io.h"
#include "titan/rl/saved_model.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/flux/pipeline.h"
#include "titan/train/flux/transformer_folder.h"

namespace titan::apps {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFluxGenerateUsage =
    "usage: titan generate --pipeline DIR --prompt TEXT [--prompt TEXT ...] --out IMAGE.png [options]\n"
    "       titan generate --pipeline DIR --prompts-from DATA --out-dir DIR [options]\n"
    "  FLUX text to image, as diffusers' FluxPipeline: Euler steps over the schedule of the folder's\n"
    "  scheduler/ (FLUX.1-dev's: shifted by the image's length, which is BFL's get_schedule;\n"
    "  FLUX.1-schnell's: unshifted), then the autoencoder. Several prompts, and several images of\n"
    "  each, make one grid: a row per prompt, a column per image.\n"
    "  --pipeline DIR          a diffusers FLUX folder: transformer/, scheduler/, text_encoder/,\n"
    "                          tokenizer/, text_encoder_2/, tokenizer_2/, vae/ (tokenizer/ may be\n"
    "                          CLIP's vocab.json + merges.txt; without scheduler/, FLUX.1-dev's schedule)\n"
    "  --checkpoint PATH       the transformer's weights from a titan train checkpoint of a FLUX\n"
    "                          flavor (.../step-N, or a folder of them: the latest complete one)\n"
    "                          instead of DIR/transformer/\n"
    "  --prompt TEXT           an image's description; repeat for more prompts\n"
    "  --out FILE              the grid, a .png (or .jpg)\n"
    "  --prompts-from DATA     every caption x.txt of a folder (make_shapes.py's layout), in name\n"
    "                          order, as prompts\n"
    "  --out-dir DIR           each image as DIR/x.png with its prompt as DIR/x.txt (x the caption's\n"
    "                          name, or the prompt's number), which make_shapes.py score reads\n"
    "  --images-per-prompt N   images of each prompt, each from its own noise (default 1)\n"
    "  --steps N               Euler steps (default 28)\n"
    "  --seed S                seed of the initial noise (default 0): the same seed gives the same images\n"
    "  --width W, --height H   pixels (default 256 x 256); multiples of 16 for FLUX.1's autoencoder\n"
    "                          and 2x2 patches\n"
    "  --cfg-scale S           two-pass classifier-free guidance (diffusers' true_cfg_scale): each step\n"
    "                          runs the prompt and the negative prompt, v = neg + S (pos - neg); 1\n"
    "                          (default): one pass, no negative prompt\n"
    "  --negative-prompt TEXT  what --cfg-scale steers away from (default \"\")\n"
    "  --guidance G            a guidance-distilled model's guidance input (flux-dev; default 3.5);\n"
    "                          refused for a model without one (flux-schnell)\n"
    "  --t5-length N           T5 tokens per prompt (default 256, flux-schnell's; flux-dev uses 512)\n"
    "Prints what was loaded and the time taken on stderr.\n";

struct Options {
  fs::path pipeline, out;
  std::optional<fs::path> checkpoint;
  std::optional<fs::path> out_dir;
  std::vector<std::string> prompts;
  std::vector<std::string> names;  // with --prompts-from: each prompt's file stem
  train::flux::ImageOptions image;
  int64_t t5_length = 256;
  bool has_negative = false, has_guidance = false;
};

double real_number(const std::string& flag, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  TITAN_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), "titan generate: ", flag,
              " wants a number, got '", text, "'");
  return v;
}

int64_t positive(const std::string& flag, const std::string& text) {
  const int64_t v = parse_whole_number("titan generate", flag, text);
  TITAN_CHECK(v >= 1, "titan generate: ", flag, " must be at least 1, got ", v);
  return v;
}

// Every x.txt of `dir`, in name order, its trailing whitespace dropped (as the data sets read captions).
void read_captions(const fs::path& dir, Options& o) {
  TITAN_CHECK(fs::is_directory(dir), "titan generate: --prompts-from ", dir.string(),
              " is not a folder; pass a folder of x.txt captions (make_shapes.py make --out)");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".txt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  TITAN_CHECK(!files.empty(), "titan generate: --prompts-from ", dir.string(), " holds no x.txt caption");
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TITAN_CHECK(in.good() || in.eof(), "titan generate: cannot read ", f.string());
    text.erase(text.find_last_not_of(" \t\r\n") + 1);
    o.prompts.push_back(text);
    o.names.push_back(f.stem().string());
  }
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  auto value = [&](size_t& i) -> const std::string& {
    TITAN_CHECK(i + 1 < args.size(), "titan generate: ", args[i], " needs a value\n", kFluxGenerateUsage);
    return args[++i];
  };
  train::flux::ImageOptions& im = o.image;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--pipeline") {
      o.pipeline = value(i);
    } else if (a == "--checkpoint") {
      o.checkpoint = value(i);
    } else if (a == "--prompt") {
      o.prompts.push_back(value(i));
    } else if (a == "--out") {
      o.out = value(i);
    } else if (a == "--out-dir") {
      o.out_dir = value(i);
    } else if (a == "--prompts-from") {
      read_captions(value(i), o);
    } else if (a == "--images-per-prompt") {
      im.images_per_prompt = positive(a, value(i));
    } else if (a == "--steps") {
      im.sampling.steps = positive(a, value(i));
    } else if (a == "--seed") {
      const int64_t seed = parse_whole_number("titan generate", a, value(i));
      TITAN_CHECK(seed >= 0, "titan generate: --seed must not be negative, got ", seed);
      im.seed = static_cast<uint64_t>(seed);
    } else if (a == "--width") {
      im.width = positive(a, value(i));
    } else if (a == "--height") {
      im.height = positive(a, value(i));
    } else if (a == "--cfg-scale") {
      im.sampling.cfg_scale = real_number(a, value(i));
    } else if (a == "--negative-prompt") {
      im.negative_prompt = value(i);
      o.has_negative = true;
    } else if (a == "--guidance") {
      im.sampling.guidance = real_number(a, value(i));
      o.has_guidance = true;
    } else if (a == "--t5-length") {
      o.t5_length = positive(a, value(i));
    } else {
      TITAN_CHECK(false, "titan generate: unknown argument '", a, "' (FLUX, with --pipeline)\n", kFluxGenerateUsage);
    }
  }
  TITAN_CHECK(!o.pipeline.empty() && !o.prompts.empty() && (!o.out.empty() || o.out_dir),
              "titan generate: FLUX needs --pipeline, at least one --prompt (or --prompts-from) and --out or "
              "--out-dir\n", kFluxGenerateUsage);
  TITAN_CHECK(o.names.empty() || o.names.size() == o.prompts.size(), "titan generate: --prompts-from and --prompt "
              "together: give the prompts one way");
  if (o.out.empty()) return o;
  std::string ext = o.out.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  TITAN_CHECK(ext == ".png" || ext == ".jpg" || ext == ".jpeg", "titan generate: --out ", o.out.string(),
              " must end in .png (or .jpg / .jpeg): the extension picks the format");
  TITAN_CHECK(o.image.sampling.cfg_scale >= 1.0, "titan generate: --cfg-scale must be at least 1 (1: no "
              "classifier-free guidance), got ", o.image.sampling.cfg_scale);
  TITAN_CHECK(!o.has_negative || o.image.sampling.cfg_scale > 1.0, "titan generate: --negative-prompt is read only "
              "with classifier-free guidance; add --cfg-scale above 1 (e.g. 4)");
  return o;
}

// The transformer of a titan train checkpoint: its job config (the checkpoint's metadata) names
// the FLUX flavor; the weights are its "model.<name>" tensors.
std::shared_ptr<models::flux::FluxTransformer> load_checkpoint_transformer(const fs::path& path) {
  const fs::path dir = rl::resolve_checkpoint(path);
  checkpoint::Reader reader(dir);
  const nlohmann::json& state = reader.metadata().state;
  const std::string where = (dir / checkpoint::kMetadataFile).string();
  TITAN_CHECK(state.contains("config") && state["config"].contains("model") &&
                  state["config"]["model"].contains("flavor"),
              "titan generate: --checkpoint ", dir.string(), ": ", where,
              " holds no job config with a model flavor (state.config.model.flavor); pass a checkpoint "
              "written by titan train of a FLUX model");
  const nlohmann::json& model = state["config"]["model"];
  const std::string flavor = model["flavor"].get<std::string>();
  const std::vector<std::string> known = models::flux::flux_flavors();
  TITAN_CHECK(std::find(known.begin(), known.end(), flavor) != known.end(), "titan generate: --checkpoint ",
              dir.string(), " holds model ", model.value("name", std::string("?")), " flavor ", flavor,
              ", not a FLUX flavor; --pipeline generates images with FLUX only (for a language model, leave "
              "--pipeline out)");
  auto transformer = std::make_shared<models::flux::FluxTransformer>(models::flux::flux_flavor(flavor));
  train::CheckpointManager::load_model(reader, *transformer);
  return transformer;
}

// Image i of prompt p as DIR/<name>.png (suffixed -i with several images per prompt) beside its
// prompt as <name>.txt: the layout make_shapes.py score reads.
void write_each(const fs::path& dir, const Options& o, const Tensor& images) {
  fs::create_directories(dir);
  const int64_t per = o.image.images_per_prompt;
  for (int64_t i = 0; i < images.size(0); ++i) {
    const size_t p = static_cast<size_t>(i / per);
    std::ostringstream name;
    if (o.names.empty())
      name << std::setw(6) << std::setfill('0') << p;
    else
      name << o.names[p];
    if (per > 1) name << "-" << i % per;
    data::write_image(dir / (name.str() + ".png"), train::flux::image_grid(images.narrow(0, i, 1), 1));
    std::ofstream(dir / (name.str() + ".txt"), std::ios::binary) << o.prompts[p];
    TITAN_CHECK(fs::exists(dir / (name.str() + ".txt")), "titan generate: cannot write ", (dir / name.str()).string(), ".txt");
  }
}

}  // namespace

bool is_flux_generate(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--pipeline") != args.end();
}

int flux_generate_command(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::cout << kFluxGenerateUsage;
    return 0;
  }
  const Options o = parse(args);
  const auto start = std::chrono::steady_clock::now();
  train::flux::ImageOptions image = o.image;
  const fs::path scheduler = o.pipeline / "scheduler";
  if (fs::exists(scheduler))
    image.sampling.schedule = train::flux::load_flow_schedule(scheduler);
  else
    std::cerr << "titan: " << o.pipeline.string() << " has no scheduler/; sampling with FLUX.1-dev's schedule "
              << "(shifted by the image's length)\n";
  auto conditioning = std::make_shared<train::flux::ConditioningStack>(
      train::flux::ConditioningPaths::of_pipeline(o.pipeline), o.t5_length);
  std::shared_ptr<models::flux::FluxTransformer> transformer =
      o.checkpoint ? load_checkpoint_transformer(*o.checkpoint)
                   : train::flux::load_transformer_folder(o.pipeline / "transformer");
  TITAN_CHECK(!o.has_guidance || transformer->args().guidance_embed,
              "titan generate: --guidance is the input of a guidance-distilled model (flux-dev), and this "
              "transformer has none (config.json's guidance_embeds is false); leave --guidance out, or use "
              "--cfg-scale for classifier-free guidance");
  train::flux::ImagePipeline pipeline(conditioning, transformer);
  std::cerr << "titan: loaded " << (o.checkpoint ? o.checkpoint->string() : (o.pipeline / "transformer").string())
            << " (flux: " << models::flux::flux_summary(transformer->args(), 1, 0).description << "); "
            << conditioning->description() << "\n";
  const Tensor images = pipeline.generate(o.prompts, image);
  if (!o.out.empty()) data::write_image(o.out, train::flux::image_grid(images, o.image.images_per_prompt));
  if (o.out_dir) write_each(*o.out_dir, o, images);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "titan: " << images.size(0) << " images of " << o.image.width << "x" << o.image.height << " in "
            << o.image.sampling.steps << " steps" << (o.image.sampling.cfg_scale > 1.0 ? " (two passes each)" : "")
            << ", " << seconds << " s; wrote " << (o.out.empty() ? o.out_dir->string() : o.out.string()) << "\n";
  return 0;
}

}  // namespace titan::apps
