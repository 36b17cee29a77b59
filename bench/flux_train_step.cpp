// One FLUX training step (issue 49): x_t = (1 - t) x0 + t noise, the transformer's velocity, the
// flow-matching loss (train/flux/rectified_flow.h), backward, clipping at 1 and an AdamW step, on
// CPU-sized models, titan in f32 and under bf16 autocast, eager and in graph mode (the step one XLA
// program through the PJRT CPU plugin, as `compile.enable` trains), against diffusers'
// FluxTransformer2DModel on PyTorch 2 eager and torch.compile, f32 and bf16 autocast
// (bench/flux_models.py), on the same threads, in one run. Both sides build the model from one
// config with random seeded weights (the weights do not change the work) and train on one fixed
// batch with fixed timesteps.
//   flux-tiny: the flavor at configs/flux/flux_tiny.toml's training shape: 64 image tokens (16x16
//              latents, patch 2) + 32 text tokens, batch 16
//   flux-mid:  hidden 384, 6 heads, 4 + 4 blocks, 256 image tokens (32x32 latents, patch 2) + 64 text
//              tokens, batch 2
// Graph mode twice: the blocks as two loops (compile.scan_layers = true, the default) and unrolled
// (false).
// --quick: flux-tiny only; --no-graph: eager only; --steps=N: timed steps a case (default 10: with 3,
// runs on a shared host moved by 15-25%). Figures are samples/s (batch / median step time).
#include <chrono>
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
#include "titan/optim/clip.h"
#include "titan/train/flux/flux_step.h"
#include "titan/train/flux/rectified_flow.h"
#include "titan/train/graph_mode/graph_step.h"

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
          .batch = 16,
          .latent_size = 16,
          .txt_tokens = 32};
}

Config mid() {
  fm::FluxModelArgs a = fm::flux_flavor("flux-tiny");
  a.latent_channels = 16;
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

constexpr double kMaxNorm = 1.0;

// How a case runs the step: titan eager, or graph mode (train::GraphStep over FlowMatchingLoss,
// the trainer's compile.enable) with the blocks as loops or unrolled.
enum class Mode : uint8_t { eager, loops, unrolled };

// A model, its optimizer and one batch: what every step of a case reuses; a graph mode's step is
// compiled here.
struct Trainer {
  Trainer(const Config& c, Mode mode, bool bf16) : model(c.args) {
    const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
    titan::Generator gen(0);
    model.init_weights(gen);
    const auto named = model.named_parameters();
    for (const auto& [n, p] : named) params.push_back(p);
    optimizer = std::make_unique<titan::optim::AdamW>(named,
                                                      titan::optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.0});
    const fm::FluxModelArgs& a = c.args;
    const Tensor img_ids = fm::image_ids(c.latent_size, c.latent_size, a.patch_size);
    const int64_t img_len = img_ids.size(0);
    batch = {.x0 = Tensor::randn({c.batch, img_len, a.in_channels}, gen),
             .noise = Tensor::randn({c.batch, img_len, a.in_channels}, gen),
             .t = Tensor::rand({c.batch}, gen),
             .txt = Tensor::randn({c.batch, c.txt_tokens, a.context_in_dim}, gen),
             .y = Tensor::randn({c.batch, a.vec_in_dim}, gen),
             .height = c.latent_size,
             .width = c.latent_size};
    if (mode == Mode::eager) return;
    auto loss = std::make_unique<titan::train::flux::FlowMatchingLoss>(model, 0.0);
    loss->set_latent_size(c.latent_size, c.latent_size);
    const titan::train::GraphStepOptions options{.runtime = {.plugin = "cpu"},
                                                 .max_norm = kMaxNorm,
                                                 .scan_layers = mode == Mode::loops,
                                                 .layer_lists = {"double_blocks", "single_blocks"}};
    graph_step = std::make_unique<titan::train::GraphStep>(std::move(loss), *optimizer, named,
                                                           titan::graph::Runner(options.runtime), options, std::cerr);
    const auto t0 = std::chrono::steady_clock::now();
    step(bf16);
    std::cerr << c.name << (bf16 ? " bf16" : " f32") << (mode == Mode::loops ? " graph, loops" : " graph, unrolled")
              << ": compiled and ran its first step in "
              << bench::fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1)
              << " s\n";
  }

  double step(bool bf16) {
    const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
    if (graph_step) return graph_step->run({titan::train::flux::FlowMatchingLoss::tensors(batch)}).loss;
    optimizer->zero_grad();
    const Tensor loss = titan::train::flux::flow_matching_loss(titan::train::flux::velocity(model, batch, 0.0),
                                                               batch.x0, batch.noise);
    loss.backward();
    titan::optim::clip_grad_norm_(params, kMaxNorm);
    optimizer->step();
    return loss.item();
  }

  fm::FluxTransformer model;
  std::vector<Tensor> params;
  std::unique_ptr<titan::optim::AdamW> optimizer;
  titan::train::flux::FluxBatch batch;
  std::unique_ptr<titan::train::GraphStep> graph_step;
};

std::string case_name(const Config& c, bool bf16, Mode mode = Mode::eager) {
  return c.name + (mode == Mode::loops ? "/graph" : mode == Mode::unrolled ? "/graph_unrolled" : "") +
         (bf16 ? "/bf16" : "");
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  bool quick = false, graph = true;
  int steps = 10;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]).starts_with("--steps=")) {
      steps = std::stoi(std::string(argv[i]).substr(8));
      TITAN_CHECK(steps > 0, "bench_flux_train_step: --steps must be positive, got ", argv[i]);
      continue;
    }
    if (std::string(argv[i]) == "--quick") {
      quick = true;
      continue;
    }
    if (std::string(argv[i]) == "--no-graph") {
      graph = false;
      continue;
    }
    args.push_back(argv[i]);
  }
  const bool bf16 = !titan::kernels::cpu::onednn_bf16_isa().empty();
  const std::vector<Config> configs =
      quick ? std::vector<Config>{tiny()} : std::vector<Config>{tiny(), mid()};
  // A step takes from tens of milliseconds to seconds: one warm-up step, then each repetition one step.
  const bench::Plan plan{.reps = steps, .min_time = 0.001, .warmup = 0.001};

  for (const Config& c : configs)
    for (const bool b : bf16 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (const Mode g : graph ? std::vector<Mode>{Mode::eager, Mode::loops, Mode::unrolled}
                                : std::vector<Mode>{Mode::eager})
        bench::add_benchmark(case_name(c, b, g), plan, [c, b, g](benchmark::State& s) {
          Trainer& t = *bench::cached_inputs<std::shared_ptr<Trainer>>(
              case_name(c, b, g), [&] { return std::make_shared<Trainer>(c, g, b); });
          bench::PeakMemory peak;
          for (auto _ : s) benchmark::DoNotOptimize(t.step(b));
          peak.report(s);
        });
  int argn = static_cast<int>(args.size());
  const std::map<std::string, bench::Measurement> titan_results = bench::run_benchmarks(argn, args.data());

  nlohmann::json request = {{"threads", titan::num_threads()},
                            {"warmup", 2},
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

  // A graph case's samples/s as a cell, and the faster graph case's step time.
  auto rate = [&](const Config& c, bool b, Mode m) {
    const auto g = titan_results.find(case_name(c, b, m));
    return g == titan_results.end() ? std::string("-")
                                    : bench::fixed(static_cast<double>(c.batch) / g->second.seconds, 1);
  };
  auto best_graph_seconds = [&](const Config& c, bool b) -> std::optional<double> {
    std::optional<double> best;
    for (const Mode m : {Mode::loops, Mode::unrolled})
      if (const auto g = titan_results.find(case_name(c, b, m)); g != titan_results.end())
        best = best ? std::min(*best, g->second.seconds) : g->second.seconds;
    return best;
  };
  auto table = [&](bool b) {
    bench::Table t{.title = std::string("FLUX training step, ") +
                            (b ? "titan under bf16 autocast" : "titan in f32") + " (samples/s)",
                   .unit = "samples/s",
                   .variants = bench::kTorchAll,
                   .titan_bf16 = b,
                   .extra_headers = {"titan ms", "titan peak", "graph, loops", "graph, unrolled", "best graph / eager"},
                   .rows = {},
                   .notes = {}};
    for (const Config& c : configs) {
      const auto it = titan_results.find(case_name(c, b));
      if (it == titan_results.end()) continue;
      const double samples = static_cast<double>(c.batch);
      const std::optional<double> best = best_graph_seconds(c, b);
      t.rows.push_back({.name = c.name,
                        .titan = samples / it->second.seconds,
                        .torch = torch.rates(c.name, samples),
                        .extra = {bench::fixed(it->second.seconds * 1e3, 1), bench::mib(it->second.peak_bytes),
                                  rate(c, b, Mode::loops), rate(c, b, Mode::unrolled),
                                  best ? bench::fixed(it->second.seconds / *best, 2) + "x" : "-"}});
    }
    t.notes = {
        "a step: x_t = (1 - t) x0 + t noise, the velocity, mean((v - (noise - x0))^2), backward, clipping at "
        "norm 1, AdamW (lr 1e-4, no weight decay); one fixed batch, fixed timesteps.",
        "titan graph (samples/s): the same step as one XLA program through the PJRT CPU plugin "
        "(train::GraphStep over FlowMatchingLoss), the blocks as two loops (compile.scan_layers = true) or "
        "unrolled (false), its compilation in the untimed first step.",
        std::string("titan: FluxTransformer") +
            (b ? " with forward and loss under AutocastGuard(kBF16) (oneDNN " +
                     titan::kernels::cpu::onednn_bf16_isa() + ")"
               : " in f32") +
            ", optim::AdamW; torch: diffusers FluxTransformer2DModel, compile = torch.compile(model), bf16 = "
            "torch.autocast(\"cpu\", dtype=torch.bfloat16) over forward and loss, AdamW as make_adamw picks.",
        (reply.contains("diffusers") ? "diffusers " + reply["diffusers"].get<std::string>() + "; "
                                     : std::string()) +
            std::to_string(plan.reps) +
            " timed steps, median: titan's after one warm-up step, torch's after two (the compile variants' "
            "first "
            "steps compile, the second can recompile)."};
    return t;
  };
  // Graph mode's own target: at least 0.9x titan eager, in each precision.
  auto graph_line = [&](bool b) {
    for (const Config& c : configs) {
      const auto e = titan_results.find(case_name(c, b));
      if (e == titan_results.end()) continue;
      for (const Mode m : {Mode::loops, Mode::unrolled})
        if (const auto g = titan_results.find(case_name(c, b, m)); g != titan_results.end())
          std::cout << c.name << (b ? " bf16" : " f32") << ": titan graph ("
                    << (m == Mode::loops ? "loops" : "unrolled") << ") / titan eager = "
                    << bench::fixed(e->second.seconds / g->second.seconds, 2) << "x\n";
    }
  };
  bench::print_table(table(false), torch);
  graph_line(false);
  if (!bf16) {
    std::cout << "\ntitan bf16 / best PyTorch variant: NOT MEASURED, this CPU has neither avx512_bf16 nor "
                 "amx_bf16\n";
    return 0;
  }
  const bench::Table b16 = table(true);
  bench::print_table(b16, torch);
  graph_line(true);
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
