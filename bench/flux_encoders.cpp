// FLUX's frozen encoders (issue 48: "encoding throughput, images/s through the VAE encoder and
// captions/s through T5 and CLIP at a small size, >= 1.3x the best diffusers / transformers
// variant on PyTorch 2"), titan against PyTorch eager and torch.compile, f32 and bf16 autocast,
// on the same threads, in one run:
//   - images: FLUX's autoencoder (its real config, random seeded weights) encoding a batch of
//     kImages 256x256 images to the latent distribution's mean and log-variance;
//   - captions: a small T5 v1.1-style encoder (d_model 512, d_ff 1024, 8 layers, 8 heads, 256
//     tokens) and a small CLIP text model (hidden 512, 8 layers, 8 heads, 77 tokens), on token ids
//     of kCaptions captions: tokenization is left out on both sides (bench_tokenizer times it).
// bench/flux_encoders_models.py writes the three folders with diffusers' and transformers'
// save_pretrained; titan loads them with its folder loaders (train/flux/), as ConditioningStack
// does, and times the models' forward under NoGradGuard, in f32 and under AutocastGuard(kBF16).
// The reference loads the same folders (bench/torch_reference.py: flux_autoencoder, text_encoder).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/autocast.h"
#include "titan/core/rng.h"
#include "titan/core/tensor.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/autoencoder/model.h"
#include "titan/models/clip/model.h"
#include "titan/models/t5/model.h"
#include "titan/train/flux/autoencoder_folder.h"
#include "titan/train/flux/text_encoder_folders.h"
#include "titan/train/metrics/peak_flops.h"

namespace {

namespace bench = titan::bench;
namespace fs = std::filesystem;
using titan::Tensor;

constexpr int64_t kImages = 1, kImageSize = 256;
constexpr int64_t kCaptions = 8, kT5Tokens = 256, kClipTokens = 77;
// Each call takes a good part of a second or more: one warm-up call, then each repetition is one
// call (min_time below any call's time).
const bench::Plan kPlan{.reps = 5, .min_time = 0.01, .warmup = 0.01};

struct Encoders {
  std::shared_ptr<titan::models::autoencoder::Autoencoder> autoencoder;
  std::unique_ptr<titan::models::t5::T5Encoder> t5;
  std::unique_ptr<titan::models::clip::ClipTextModel> clip;
  Tensor images, t5_ids, clip_ids;
  // The text encoders' weights in bf16, made on the first call and kept, as ConditioningStack
  // keeps them for its frozen encoders.
  titan::AutocastCasts text_casts;
};

Tensor random_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
  for (int64_t& id : ids) id = pick(gen);
  return Tensor::from_vector(ids, {rows, cols});
}

// One case: `name`'s forward `fn` in f32, or under bf16 autocast (name + "/bf16").
template <typename F>
void add_case(const std::string& name, bool bf16, F fn) {
  bench::add_benchmark(name + (bf16 ? "/bf16" : ""), kPlan, [=](benchmark::State& s) {
    const titan::autograd::NoGradGuard frozen;
    const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
    bench::PeakMemory peak;
    for (auto _ : s) {
      Tensor out = fn();
      benchmark::DoNotOptimize(out.data_ptr());
    }
    peak.report(s);
  });
}

const std::string kImagesCase = "images/autoencoder " + std::to_string(kImages) + "x3x" +
                                std::to_string(kImageSize) + "x" + std::to_string(kImageSize);
const std::string kT5Case = "captions/T5 " + std::to_string(kCaptions) + "x" + std::to_string(kT5Tokens);
const std::string kClipCase = "captions/CLIP " + std::to_string(kCaptions) + "x" + std::to_string(kClipTokens);
const std::string kTextRow = "captions/T5 + CLIP";

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  const bool bf16 = !titan::kernels::cpu::onednn_bf16_isa().empty();

  const fs::path dir = fs::temp_directory_path() / ("titan_flux_encoders_" + std::to_string(getpid()));
  std::cout << "Writing the encoders' folders with diffusers and transformers (bench/flux_encoders_models.py) in "
            << dir.string() << "\n"
            << std::flush;
  const nlohmann::json folders =
      bench::run_python_script(bench::python_path(), "flux_encoders_models.py", {{"dir", dir.string()}});
  if (folders.contains("error")) {
    std::cerr << "bench_flux_encoders: the reference folders could not be written, so neither side can run: "
              << folders["error"].get<std::string>()
              << "\n(set TITAN_PYTHON to an interpreter with torch, diffusers and transformers, or run "
                 "scripts/setup.sh for the source tree's .venv)\n";
    fs::remove_all(dir);
    return 1;
  }
  const std::string vae_dir = folders["vae"], t5_dir = folders["t5"], clip_dir = folders["clip"];

  Encoders e;
  e.autoencoder = titan::train::flux::load_autoencoder_folder(vae_dir);
  e.t5 = titan::train::flux::load_t5_encoder(t5_dir);
  e.clip = titan::train::flux::load_clip_text(clip_dir);
  titan::Generator gen(0);
  e.images = Tensor::rand({kImages, 3, kImageSize, kImageSize}, gen, {}, -1.0, 1.0);
  e.t5_ids = random_ids(kCaptions, kT5Tokens, e.t5->args().vocab_size, 1);
  e.clip_ids = random_ids(kCaptions, kClipTokens, e.clip->args().vocab_size, 2);

  for (const bool b : bf16 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    add_case(kImagesCase, b, [&e] { return e.autoencoder->encode_distribution(e.images).logvar; });
    add_case(kT5Case, b, [&e] {
      const titan::AutocastCastCache weights(e.text_casts);
      return e.t5->forward(e.t5_ids);
    });
    add_case(kClipCase, b, [&e] {
      const titan::AutocastCastCache weights(e.text_casts);
      return e.clip->forward(e.clip_ids).pooler_output;
    });
  }

  // Rounds alternate titan and PyTorch, so that other processes' load falls on both alike.
  const bench::Interleaved timed = bench::run_interleaved(argc, argv, 1, [&](const auto& ran) {
    const nlohmann::json specs = {
        {kImagesCase,
         {{"op", "flux_autoencoder"}, {"folder", vae_dir}, {"batch", kImages}, {"size", kImageSize}, {"mode", "fwd"}}},
        {kT5Case,
         {{"op", "text_encoder"}, {"model", "t5"}, {"folder", t5_dir}, {"batch", kCaptions}, {"seq", kT5Tokens},
          {"mode", "fwd"}}},
        {kClipCase,
         {{"op", "text_encoder"}, {"model", "clip"}, {"folder", clip_dir}, {"batch", kCaptions},
          {"seq", kClipTokens}, {"mode", "fwd"}}}};
    std::vector<bench::TorchCase> cases;
    for (const auto& [name, spec] : specs.items())
      if (ran.count(name) || ran.count(name + "/bf16"))
        cases.push_back({.name = name, .plan = kPlan, .spec = spec, .variants = bench::kTorchAll});
    return cases;
  });
  fs::remove_all(dir);
  const bench::TorchResults& torch = timed.torch;

  auto titan_seconds = [&](const std::string& name) -> std::optional<double> {
    auto it = timed.titan.find(name);
    if (it == timed.titan.end()) return std::nullopt;
    return it->second.seconds;
  };
  // Per minute: an image takes seconds here, and the table prints one decimal.
  auto work = [](const std::string& name) { return 60.0 * double(name == kImagesCase ? kImages : kCaptions); };
  // A precision's table: a row per case, and the text row, T5's and CLIP's times added.
  auto table = [&](bool b) {
    const std::string suffix = b ? "/bf16" : "";
    bench::Table t{.title = std::string("FLUX encoders, ") + (b ? "titan under bf16 autocast" : "titan in f32") +
                            " (images or captions per minute)",
                   .unit = "/min",
                   .variants = bench::kTorchAll,
                   .titan_bf16 = b,
                   .extra_headers = {"titan ms", "titan peak"},
                   .rows = {},
                   .notes = {}};
    for (const std::string& name : {kImagesCase, kT5Case, kClipCase}) {
      const auto s = titan_seconds(name + suffix);
      if (!s) continue;
      t.rows.push_back({.name = name,
                        .titan = work(name) / *s,
                        .torch = torch.rates(name, work(name)),
                        .extra = {bench::fixed(*s * 1e3, 1), bench::mib(timed.titan.at(name + suffix).peak_bytes)}});
    }
    const auto t5 = titan_seconds(kT5Case + suffix), clip = titan_seconds(kClipCase + suffix);
    if (t5 && clip) {
      const double captions = work(kT5Case);
      bench::Row text{.name = kTextRow, .titan = captions / (*t5 + *clip), .torch = {},
                      .extra = {bench::fixed((*t5 + *clip) * 1e3, 1), ""}};
      for (const std::string& v : bench::kTorchAll) {
        const auto rt5 = torch.get(kT5Case, v), rclip = torch.get(kClipCase, v);
        if (rt5 && rclip) text.torch[v] = captions / (*rt5 + *rclip);
      }
      t.rows.push_back(std::move(text));
    }
    t.notes = {
        "images: diffusers AutoencoderKL (FLUX.1's config: block_out_channels 128/256/512/512, 2 layers per block, "
        "16 latent channels, no quant convs), encode(x).latent_dist mean and logvar; titan: "
        "Autoencoder::encode_distribution.",
        "captions: transformers T5EncoderModel(ids).last_hidden_state and CLIPTextModel(ids).pooler_output on "
        "random ids (no tokenization on either side); " +
            kTextRow + ": both encoders, their times added.",
        std::string("titan: the models' forward under NoGradGuard") +
            (b ? " and AutocastGuard(kBF16) (oneDNN " + titan::kernels::cpu::onednn_bf16_isa() +
                     "), the text encoders' weights converted to bf16 once (AutocastCasts, as ConditioningStack "
                     "keeps them)"
               : " in f32") +
            "; torch: under torch.no_grad(), compile = torch.compile(fn, dynamic=False) of the whole call, "
            "bf16 = torch.autocast(\"cpu\", dtype=torch.bfloat16).",
        "torch " + folders["torch"].get<std::string>() + ", diffusers " + folders["diffusers"].get<std::string>() +
            ", transformers " + folders["transformers"].get<std::string>() + "; " + std::to_string(kPlan.reps) +
            " timed calls after a warm-up call per round, " + std::to_string(timed.rounds) +
            " round(s), median."};
    return t;
  };
  const bench::Table f32 = table(false);
  bench::print_table(f32, torch);
  if (!bf16) {
    std::cout << "\ntarget (titan bf16 >= 1.3x the best PyTorch variant): NOT MEASURED, this CPU has neither "
                 "avx512_bf16 nor amx_bf16\n";
    return 1;
  }
  const bench::Table b16 = table(true);
  bench::print_table(b16, torch);
  // The text encoders are GEMM-bound: their matrix products at this CPU's bf16 GEMM rate bound
  // how far any side can get ahead of the best PyTorch variant.
  const double peak = titan::train::measure_peak_flops(titan::kBF16);
  const double text_flops = double(kCaptions) * (e.t5->args().forward_matmul_flops(kT5Tokens) +
                                                 e.clip->args().forward_matmul_flops(kClipTokens));
  const double floor_ms = text_flops / peak * 1e3;
  std::optional<double> ceiling;
  std::cout << "\nGEMM ceiling, captions/T5 + CLIP bf16: a call multiplies " << bench::fixed(text_flops / 1e9, 1)
            << " GFLOP in matrix products (norms, softmax and activations not counted); titan's bf16 GEMM "
               "here runs "
            << bench::fixed(peak / 1e9, 1) << " GFLOP/s (2048^3, oneDNN " << titan::kernels::cpu::onednn_bf16_isa()
            << ", best of 5), so the products alone take " << bench::fixed(floor_ms, 1) << " ms.\n";
  {
    // Which of oneDNN's implementations serve the encoders' products: on one CPU a shape may get a
    // slower one than 2048^3 does.
    using titan::kernels::cpu::onednn_gemm_bf16_impl;
    const auto& t5 = e.t5->args();
    const auto& clip = e.clip->args();
    const int64_t tokens = kCaptions * kT5Tokens;
    std::cout << "  oneDNN " << titan::kernels::cpu::onednn_version() << " implementations: 2048^3 "
              << onednn_gemm_bf16_impl(false, false, 2048, 2048, 2048) << "; T5's projections (" << tokens << " x "
              << t5.inner_dim() << " x " << t5.d_model << ", weight transposed) "
              << onednn_gemm_bf16_impl(false, true, tokens, t5.inner_dim(), t5.d_model) << "; T5's scores ("
              << kT5Tokens << " x " << kT5Tokens << " x " << t5.d_kv << ") "
              << onednn_gemm_bf16_impl(false, true, kT5Tokens, kT5Tokens, t5.d_kv) << "; CLIP's scaled scores ("
              << kClipTokens << " x " << kClipTokens << " x " << clip.head_dim() << ") "
              << onednn_gemm_bf16_impl(false, true, kClipTokens, kClipTokens, clip.head_dim(),
                                       static_cast<float>(1.0 / std::sqrt(double(clip.head_dim()))))
              << ".\n";
  }
  for (const bench::Row& r : b16.rows) {
    if (r.name != kTextRow || !r.titan) continue;
    const double titan_ms = work(kT5Case) / *r.titan * 1e3;
    std::cout << "  titan " << bench::fixed(titan_ms, 1) << " ms, " << bench::fixed(100 * floor_ms / titan_ms, 0)
              << "% of that rate";
    if (const auto best = bench::best_any(r)) {
      const double torch_ms = work(kT5Case) / best->second * 1e3;
      ceiling = torch_ms / floor_ms;
      const double target_ms = torch_ms / 1.3;
      std::cout << "; torch " << best->first << " " << bench::fixed(torch_ms, 1) << " ms, "
                << bench::fixed(100 * floor_ms / torch_ms, 0) << "%. At that GEMM rate titan cannot run more than "
                << bench::fixed(*ceiling, 2) << "x the best PyTorch variant; 1.3x is "
                << bench::fixed(target_ms, 1) << " ms, which leaves " << bench::fixed(target_ms - floor_ms, 1)
                << " ms (" << bench::fixed(100 * (target_ms - floor_ms) / target_ms, 0)
                << "%) for everything but the products";
    }
    std::cout << "\n";
  }
  std::cout << "\n";
  for (const bench::Row& r : b16.rows) {
    if (r.name == kT5Case || r.name == kClipCase) continue;
    const auto best = bench::best_any(r);
    if (!r.titan || !best) {
      std::cout << "target " << r.name << ": titan bf16 >= 1.3x the best PyTorch variant: NOT MEASURED\n";
      continue;
    }
    const double ratio = *r.titan / best->second;
    std::cout << "target " << r.name << ": titan bf16 >= 1.3x the best PyTorch variant (" << best->first
              << "): " << bench::fixed(ratio, 2) << "x " << (ratio >= 1.3 ? "MET" : "MISSED");
    if (r.name == kTextRow && ceiling)
      std::cout << " (GEMM ceiling " << bench::fixed(*ceiling, 2) << "x)";
    std::cout << "\n";
  }
  return 0;
}
