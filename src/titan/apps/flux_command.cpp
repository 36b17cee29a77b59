#include "titan/apps/flux_command.h"

#include <cstdio>
#include <iostream>

#include "titan/apps/args.h"
#include "titan/apps/progress_line.h"
#include "titan/core/autocast.h"
#include "titan/core/error.h"
#include "titan/dist/process_group.h"
#include "titan/train/flux/conditioning.h"
#include "titan/train/flux/encoding_cache.h"

namespace titan::apps {

namespace {

namespace fs = std::filesystem;

constexpr const char* kFluxUsage =
    "usage: titan flux encode --data PATH --out DIR (--pipeline DIR | --t5 DIR --t5-tokenizer DIR --clip DIR\n"
    "                         --clip-tokenizer DIR --autoencoder PATH) [options]\n"
    "  Encodes an image-caption data set once with FLUX's frozen encoders, so that training reads\n"
    "  the encodings: per sample T5's hidden states, CLIP's pooled vector and the autoencoder's latent\n"
    "  mean and log-variance, in sharded safetensors under DIR, plus the empty caption's encodings.\n"
    "  Run it again after a stop: only missing shards are written. Under mpirun each rank writes\n"
    "  its own shards.\n"
    "  --data PATH          a folder of image + caption .txt pairs, or webdataset .tar shards (a folder,\n"
    "                       file or glob)\n"
    "  --pipeline DIR       a diffusers FLUX folder: text_encoder/, tokenizer/, text_encoder_2/,\n"
    "                       tokenizer_2/, vae/ (each of the five options below overrides its part)\n"
    "  --t5 DIR, --clip DIR transformers T5EncoderModel / CLIPTextModel folders\n"
    "  --t5-tokenizer DIR, --clip-tokenizer DIR   folders holding tokenizer.json (CLIP's: or vocab.json\n"
    "                       + merges.txt)\n"
    "  --autoencoder PATH   a diffusers AutoencoderKL folder, or BFL's ae.safetensors\n"
    "  --image-size N       images resized and cropped to N x N (default 256)\n"
    "  --crop MODE          random (default; seeded per sample) or center\n"
    "  --seed N             the random crops' seed (default 0)\n"
    "  --t5-length N        T5 tokens per caption (default 256, flux-schnell's; flux-dev uses 512)\n"
    "  --batch N            samples encoded at once (default 8)\n"
    "  --shard-samples N    samples per shard (default 256)\n"
    "  --dtype D            f32 (default) or bf16: the encoders run under bf16 autocast and the\n"
    "                       encodings are stored in bf16\n"
    "  --bad-data MODE      error (default) or skip: leave out and count images that do not decode\n"
    "                       or are smaller than the image size\n";

struct EncodeOptions {
  std::string data;
  train::flux::ConditioningPaths paths;
  train::flux::EncodingCacheOptions cache;
  int64_t t5_length = 256;
  DType dtype = kF32;
};

EncodeOptions parse_encode(const std::vector<std::string>& args) {
  EncodeOptions o;
  std::string pipeline;
  std::map<std::string, std::string> parts;
  auto value = [&](size_t& i) -> const std::string& {
    TITAN_CHECK(i + 1 < args.size(), "titan flux encode: ", args[i], " needs a value\n", kFluxUsage);
    return args[++i];
  };
  auto number = [&](size_t& i) { return parse_whole_number("titan flux encode", args[i], value(i)); };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--data") {
      o.data = value(i);
    } else if (a == "--out") {
      o.cache.out = value(i);
    } else if (a == "--pipeline") {
      pipeline = value(i);
    } else if (a == "--t5" || a == "--t5-tokenizer" || a == "--clip" || a == "--clip-tokenizer" ||
               a == "--autoencoder") {
      parts[a] = value(i);
    } else if (a == "--image-size") {
      o.cache.transform.size = number(i);
    } else if (a == "--crop") {
      const std::string& v = value(i);
      TITAN_CHECK(v == "random" || v == "center", "titan flux encode: --crop is random or center, got '", v, "'");
      o.cache.transform.crop = v == "center" ? data::ImageCrop::center : data::ImageCrop::random;
    } else if (a == "--seed") {
      o.cache.transform.seed = static_cast<uint64_t>(number(i));
    } else if (a == "--t5-length") {
      o.t5_length = number(i);
    } else if (a == "--batch") {
      o.cache.batch = number(i);
    } else if (a == "--shard-samples") {
      o.cache.shard_samples = number(i);
    } else if (a == "--dtype") {
      const std::string& v = value(i);
      TITAN_CHECK(v == "f32" || v == "bf16", "titan flux encode: --dtype is f32 or bf16, got '", v, "'");
      o.dtype = v == "bf16" ? kBF16 : kF32;
    } else if (a == "--bad-data") {
      const std::string& v = value(i);
      TITAN_CHECK(v == "error" || v == "skip", "titan flux encode: --bad-data is error or skip, got '", v, "'");
      o.cache.bad_data = v == "skip" ? data::BadData::skip : data::BadData::error;
    } else {
      TITAN_CHECK(false, "titan flux encode: unknown argument '", a, "'\n", kFluxUsage);
    }
  }
  TITAN_CHECK(!o.data.empty(), "titan flux encode: no --data given\n", kFluxUsage);
  TITAN_CHECK(!o.cache.out.empty(), "titan flux encode: no --out given\n", kFluxUsage);
  TITAN_CHECK(o.cache.transform.size > 0 && o.cache.transform.size % 16 == 0, "titan flux encode: --image-size ",
              o.cache.transform.size, " must be a positive multiple of 16 (the autoencoder halves it 3 times and "
              "FLUX packs 2x2 latents)");
  if (!pipeline.empty()) o.paths = train::flux::ConditioningPaths::of_pipeline(pipeline);
  const std::pair<const char*, fs::path*> fields[] = {{"--t5", &o.paths.t5},
                                                      {"--t5-tokenizer", &o.paths.t5_tokenizer},
                                                      {"--clip", &o.paths.clip},
                                                      {"--clip-tokenizer", &o.paths.clip_tokenizer},
                                                      {"--autoencoder", &o.paths.autoencoder}};
  for (const auto& [flag, path] : fields) {
    if (parts.contains(flag)) *path = parts.at(flag);
    TITAN_CHECK(!path->empty(), "titan flux encode: no ", flag, " given (nor --pipeline)\n", kFluxUsage);
  }
  return o;
}

int encode(const std::vector<std::string>& args) {
  const EncodeOptions o = parse_encode(args);
  dist::ProcessGroup& world = dist::world();
  train::flux::ConditioningStack stack(o.paths, o.t5_length);
  const data::ImageCaptionDataset dataset(
      {.path = o.data, .bad_data = o.cache.bad_data, .path_key = "titan flux encode --data"});
  train::flux::EncodingCacheOptions cache = o.cache;
  cache.description = stack.description() + "; images " + std::to_string(cache.transform.size) + " px, " +
                      (cache.transform.crop == data::ImageCrop::center ? "center crop"
                                                                       : "random crop seed " +
                                                                             std::to_string(cache.transform.seed)) +
                      "; " + std::string(dtype_name(o.dtype));
  cache.scaling_factor = stack.autoencoder().args().scaling_factor;
  cache.shift_factor = stack.autoencoder().args().shift_factor;
  const AutocastGuard autocast(o.dtype);
  auto stored = [&](std::map<std::string, Tensor> tensors) {
    for (auto& [name, t] : tensors) t = t.to(o.dtype);
    return tensors;
  };
  auto encode_samples = [&](std::span<const Tensor> images, std::span<const std::string> captions) {
    Tensor batch = Tensor::empty({static_cast<int64_t>(images.size()), 3, cache.transform.size, cache.transform.size});
    for (size_t i = 0; i < images.size(); ++i) batch.narrow(0, static_cast<int64_t>(i), 1).copy_(images[i]);
    std::map<std::string, Tensor> out = stack.encode_text(captions);
    out.merge(stack.encode_images(batch));
    return stored(std::move(out));
  };
  const std::string empty_caption;
  const std::map<std::string, Tensor> empty_prompt = stored(stack.encode_text({&empty_caption, 1}));

  ProgressLine line;
  auto progress = [&](int64_t done, int64_t total) {
    if (world.rank() != 0) return;
    char figures[96];
    std::snprintf(figures, sizeof figures, "rank 0: %lld/%lld samples  %.2f samples/s", static_cast<long long>(done),
                  static_cast<long long>(total), static_cast<double>(done) / std::max(line.seconds(), 1e-9));
    line.update(done, total, figures, done >= total);
  };
  const train::flux::EncodingCacheReport report =
      train::flux::write_encoding_cache(dataset, encode_samples, empty_prompt, cache, world, progress);
  std::cout << "titan flux encode: rank " << world.rank() << ": " << report.samples << " samples encoded, "
            << report.shards_kept << " shards kept from an earlier run, " << report.shards << " shards in "
            << cache.out << "\n";
  for (const auto& [reason, count] : report.skipped)
    std::cout << "titan flux encode: rank " << world.rank() << ": " << count << " skipped (" << reason << ")\n";
  return 0;
}

}  // namespace

int flux_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kFluxUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "encode") return encode(args);
  TITAN_CHECK(false, "titan flux: unknown subcommand '", args[0], "'\n", kFluxUsage);
  return 2;
}

}  // namespace titan::apps
