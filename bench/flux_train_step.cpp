// One FLUX training step (issue 49): x_t = (1 - t) x0 + t noise, the transformer's velocity, the
// flow-matching loss (train/flux/rectified_flow.h), backward and an AdamW step, on CPU-sized
// models, titan in f32 and under bf16 autocast against diffusers' FluxTransformer2DModel on
// PyTorch 2 eager and torch.compile, f32 and bf16 autocast (bench/flux_models.py), on the same
// threads, in one run. Both sides build the model from one config with random seeded weights (the
// weights do not change the work) and train on one fixed batch with fixed timesteps.
//   flux-tiny: the flavor (hidden 128, 4 heads, 2 + 2 blocks), 64 image tokens + 16 text tokens, batch 2
//   flux-mid:  hidden 384, 6 heads, 4 + 4 blocks, 256 image tokens (32x32 latents, patch 2) + 64 text
//              tokens, batch 2
// --quick: flux-tiny only, fewer steps. Figures are samples/s (batch / median step time).
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/core/autocast.h"
#include "titan/core/parallel.h"
#include "titan/core/rng.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/flux/model.h"
#include "titan/optim/adamw.h"
#include "titan/train/flux/rectified_flow.h"

namespace {

namespace bench = titan::bench;
namespace fm = titan::models::flux;
using titan::Tensor;

struct Config {
  std::string name;
  fm::FluxModelArgs args;
  int64_t batch = 2, latent_size = 16, txt_tokens = 16;
};

Config tiny() {
  return {.name = "flux-tiny",
          .args = fm::flux_flavor("flux-tiny"),
          .batch = 2,
          .latent_size = 16,
          .txt_tokens = 16};
}

Config mid() {
  fm::FluxModelArgs a = fm::flux_flavor("flux-tiny");
  a.in_channels = 64;
  a.context_in_dim = 256;
  a.vec_in_dim = 128;
  a.hidden_size = 384;
  a.num_heads = 6;
  a.axes_dim = {16, 24, 24};
  a.depth = 4;
  a.depth_single_blocks = 4;
  return {.name = "flux-mid", .args = a, .batch = 2, .latent_size = 32, .txt_tokens = 64};
}

nlohmann::json to_json(const Config& c) {
  const fm::FluxModelArgs& a = c.args;
  return {{"name", c.name},
          {"hidden", a.hidden_size},
          {"heads", a.num_heads},
          {"depth", a.depth},
          {"depth_single", a.depth_single_blocks},
          {"in_channels", a.in_channels},
          {"context_in_dim", a.context_in_dim},
          {"vec_in_dim", a.vec_in_dim},
          {"axes_dim", a.axes_dim},
          {"batch", c.batch},
          {"latent_size", c.latent_size},
          {"patch", a.patch_size},
          {"txt_tokens", c.txt_tokens}};
}

// A model, its optimizer and one batch: what every step of a case reuses.
struct Trainer {
  explicit Trainer(const Config& c) : model(c.args) {
    titan::Generator gen(0);
    model.init_weights(gen);
    optimizer = std::make_unique<titan::optim::AdamW>(
        model.named_parameters(), titan::optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.0});
    const fm::FluxModelArgs& a = c.args;
    in.img_ids = fm::image_ids(c.latent_size, c.latent_size, a.patch_size);
    const int64_t img_len = in.img_ids.size(0);
    x0 = Tensor::randn({c.batch, img_len, a.in_channels}, gen);
    noise = Tensor::randn({c.batch, img_len, a.in_channels}, gen);
    in.txt = Tensor::randn({c.batch, c.txt_tokens, a.context_in_dim}, gen);
    in.txt_ids = fm::text_ids(c.txt_tokens);
    in.timesteps = Tensor::rand({c.batch}, gen);
    in.y = Tensor::randn({c.batch, a.vec_in_dim}, gen);
  }

  double step(bool bf16) {
    optimizer->zero_grad();
    Tensor loss;
    {
      const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
      fm::FluxInputs step_in = in;
      step_in.img = titan::train::flux::noisy_latents(x0, noise, in.timesteps);
      loss = titan::train::flux::flow_matching_loss(model(step_in), x0, noise);
    }
    loss.backward();
    optimizer->step();
    return loss.item();
  }

  fm::FluxTransformer model;
  std::unique_ptr<titan::optim::AdamW> optimizer;
  fm::FluxInputs in;
  Tensor x0, noise;
};

std::string case_name(const Config& c, bool bf16) {
  return c.name + (bf16 ? "/bf16" : "");
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  bool quick = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      quick = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  const bool bf16 = !titan::kernels::cpu::onednn_bf16_isa().empty();
  const std::vector<Config> configs =
      quick ? std::vector<Config>{tiny()} : std::vector<Config>{tiny(), mid()};
  // A step takes from tens of milliseconds to seconds: one warm-up step, then each repetition one step.
  const bench::Plan plan{.reps = quick ? 3 : 5, .min_time = 0.001, .warmup = 0.001};

  for (const Config& c : configs)
    for (const bool b : bf16 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      bench::add_benchmark(case_name(c, b), plan, [c, b](benchmark::State& s) {
        Trainer& t = *bench::cached_inputs<std::shared_ptr<Trainer>>(
            case_name(c, b), [&] { return std::make_shared<Trainer>(c); });
        bench::PeakMemory peak;
        for (auto _ : s) benchmark::DoNotOptimize(t.step(b));
        peak.report(s);
      });
  int argn = static_cast<int>(args.size());
  const std::map<std::string, bench::Measurement> titan_results = bench::run_benchmarks(argn, args.data());

  nlohmann::json request = {{"threads", titan::num_threads()},
                            {"warmup", 1},
                            {"steps", plan.reps},
                            {"seed", 0},
                            {"variants", bench::kTorchAll},
                            {"configs", nlohmann::json::array()}};
  for (const Config& c : configs)
    if (titan_results.count(case_name(c, false)) || titan_results.count(case_name(c, true)))
      request["configs"].push_back(to_json(c));
  std::cout << "Timing diffusers' FluxTransformer2DModel (bench/flux_models.py)\n" << std::flush;
  const nlohmann::json reply = bench::run_torch_script("flux_models.py", request);
  const bench::TorchResults torch = bench::read_torch_reply(reply, "bench/flux_models.py");

  auto table = [&](bool b) {
    bench::Table t{.title = std::string("FLUX training step, ") +
                            (b ? "titan under bf16 autocast" : "titan in f32") + " (samples/s)",
                   .unit = "samples/s",
                   .variants = bench::kTorchAll,
                   .titan_bf16 = b,
                   .extra_headers = {"titan ms", "titan peak"},
                   .rows = {},
                   .notes = {}};
    for (const Config& c : configs) {
      const auto it = titan_results.find(case_name(c, b));
      if (it == titan_results.end()) continue;
      const double samples = static_cast<double>(c.batch);
      t.rows.push_back(
          {.name = c.name,
           .titan = samples / it->second.seconds,
           .torch = torch.rates(c.name, samples),
           .extra = {bench::fixed(it->second.seconds * 1e3, 1), bench::mib(it->second.peak_bytes)}});
    }
    t.notes = {
        "a step: x_t = (1 - t) x0 + t noise, the velocity, mean((v - (noise - x0))^2), backward, AdamW (lr "
        "1e-4, no "
        "weight decay); one fixed batch, fixed timesteps.",
        std::string("titan: FluxTransformer") +
            (b ? " with forward and loss under AutocastGuard(kBF16) (oneDNN " +
                     titan::kernels::cpu::onednn_bf16_isa() + ")"
               : " in f32") +
            ", optim::AdamW; torch: diffusers FluxTransformer2DModel, compile = torch.compile(model), bf16 = "
            "torch.autocast(\"cpu\", dtype=torch.bfloat16) over forward and loss, AdamW as make_adamw picks.",
        (reply.contains("diffusers") ? "diffusers " + reply["diffusers"].get<std::string>() + "; "
                                     : std::string()) +
            std::to_string(plan.reps) +
            " timed steps after a warm-up step (the compile variants' first step compiles), "
            "median."};
    return t;
  };
  bench::print_table(table(false), torch);
  if (!bf16) {
    std::cout << "\ntitan bf16 / best PyTorch variant: NOT MEASURED, this CPU has neither avx512_bf16 nor "
                 "amx_bf16\n";
    return 0;
  }
  const bench::Table b16 = table(true);
  bench::print_table(b16, torch);
  std::cout << "\n";
  for (const bench::Row& r : b16.rows) {
    const auto best = bench::best_any(r);
    if (!r.titan || !best) {
      std::cout << r.name << ": titan bf16 / best PyTorch variant: NOT MEASURED\n";
      continue;
    }
    std::cout << r.name << ": best PyTorch variant " << best->first << " " << bench::fixed(best->second, 2)
              << " samples/s; titan bf16 / best = " << bench::fixed(*r.titan / best->second, 2) << "x\n";
  }
  return 0;
}
