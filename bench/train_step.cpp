// Llama 3 training steps on the CPU: tokens/s, achieved FLOP/s and peak memory of titan and of
// PyTorch 2 training TorchTitan's Llama 3 (bench/llama3_torch.py) on the same configs, threads and
// machine, in one run, plus what activation checkpointing saves in titan.
//
// A step is train::train_step, the trainer's own: forward -> ops::cross_entropy -> backward ->
// clip_grad_norm_ -> AdamW step; PyTorch's is the same sequence (bench/train_step_torch.py) in each
// of its variants (kTrainStepTorch): eager, torch.compile per transformer block (as TorchTitan
// compiles, for FSDP) and torch.compile of the whole model (as a user on one device compiles), in
// f32 and under bf16 autocast. titan is measured against the best of them: titan f32 against the
// best f32 variant (and, in a second ratio, against the best of all), titan bf16 against the best of
// all; each ratio names the variant it is against. Every round runs in a fresh process (this binary with
// --worker, or the script), so that the resident-set figures of one round are not inflated by
// another's and the sides are measured alike; titan and PyTorch rounds alternate, so load from
// other processes falls on all, and the figures are medians.
//
// Graph mode: each round also runs titan's train::GraphStep (the same step as one XLA program,
// compiled through a PJRT plugin) and JAX's (bench/train_step_jax.py, the same step in plain JAX,
// jitted whole): XLA driven from Python is what graph mode must match, titan eager what it must not
// fall far behind. They get a table of their own, with their compile times.
//
// Memory: "RSS growth" is the resident set's high-water mark over the timed steps (reset after
// the warm-up steps) minus the resident set before the model was built: parameters, gradients,
// optimizer moments and activations, with whatever the allocators keep on top, without the
// runtime itself (the Python interpreter and libtorch's code weigh hundreds of MiB). Both sides
// hand init's temporaries back before the first step. titan's allocator high-water mark over the
// timed steps (live tensors only) is printed beside it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/core/error.h"
#include "titan/core/process_malloc.h"
#include "titan/core/parallel.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/llama3/model.h"
#include "titan/models/llama3/parallelize.h"
#include "titan/ops/linalg.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/metrics/peak_flops.h"
#include "titan/train/step/eager_step.h"

namespace {

using nlohmann::json;
using titan::Tensor;
namespace bench = titan::bench;
namespace llama3 = titan::models::llama3;

struct Config {
  std::string name;
  int64_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab_size, seq, batch;
  int warmup, steps;  // per round; sized so that a round takes seconds, not minutes
};

const std::vector<Config>& configs() {
  static const std::vector<Config> table = {
      {"S", 256, 4, 8, 4, 768, 2048, 256, 8, 2, 8},
      {"M", 512, 8, 8, 4, 1536, 8192, 512, 4, 1, 3},
      {"L", 768, 12, 12, 4, 2048, 32000, 1024, 2, 1, 2},
      // Llama 3.2 1B's shape (tied output aside): for accelerators only (--device), where S-L
      // leave the chip idle between kernels.
      {"XL", 2048, 16, 32, 8, 8192, 128256, 2048, 4, 2, 5},
      // Llama 3.2 3B's shape (tied output aside), 8192 tokens a step: accelerators only.
      {"3B", 3072, 28, 24, 8, 8192, 128256, 4096, 2, 2, 5},
  };
  return table;
}

const Config& config_named(const std::string& name) {
  for (const Config& c : configs())
    if (c.name == name) return c;
  TITAN_CHECK(false, "bench_train_step: unknown config '", name, "'; choose S, M, L, XL or 3B");
  return configs().front();
}

llama3::ModelArgs model_args(const Config& c) {
  llama3::ModelArgs a;
  a.dim = c.dim;
  a.n_layers = c.n_layers;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.ffn_dim = c.ffn_dim;
  a.vocab_size = c.vocab_size;
  a.max_seq_len = c.seq;
  return a;
}

// TorchTitan's Llama 3 recipe, on both sides.
constexpr double kLr = 8e-4, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8, kWeightDecay = 0.1, kMaxNorm = 1.0;
constexpr uint64_t kSeed = 0;

// The step's linear-layer GEMMs alone: ops::linear forward and its backward (the input and
// weight gradients) for every projection and the output head, on tensors of the step's shapes.
// Attention's products are left out.
// Under the caller's autocast state, as the step runs.
double linear_gemm_seconds(const Config& c) {
  const int64_t rows = c.batch * c.seq, kv = c.n_kv_heads * (c.dim / c.n_heads);
  struct Linear {
    int64_t out, in;
  };
  std::vector<Linear> linears;
  for (int64_t l = 0; l < c.n_layers; ++l)
    linears.insert(linears.end(), {{c.dim, c.dim},
                                   {kv, c.dim},
                                   {kv, c.dim},
                                   {c.dim, c.dim},
                                   {c.ffn_dim, c.dim},
                                   {c.ffn_dim, c.dim},
                                   {c.dim, c.ffn_dim}});
  linears.push_back({c.vocab_size, c.dim});
  double seconds = 0;
  for (const Linear& l : linears) {
    Tensor x = Tensor::full({rows, l.in}, 0.01).requires_grad_();
    Tensor w = Tensor::full({l.out, l.in}, 0.02).requires_grad_();
    Tensor dy = Tensor::full({rows, l.out}, 0.01);
    auto t0 = std::chrono::steady_clock::now();
    titan::autograd::grad({titan::ops::linear(x, w)}, {dy}, {x, w});
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

// --xla_options: XLA's options for graph mode's compilations (compile.xla_options), given to every
// titan graph round's worker; "" leaves XLA's defaults.
std::string g_xla_options;
// --cudnn_attention=false: graph mode on a CUDA plugin with compile.cudnn_attention = false (XLA's
// attention instead of cuDNN's), given to every titan graph round's worker.
bool g_cudnn_attention = true;

// One titan round in this process: build, warm up, time; the reply bench/train_step_torch.py gives.
// bf16: the step under training.mixed_precision_param = "bfloat16"'s autocast, as the trainer runs it.
// graph: the step is train::GraphStep's (compiled in the first step) instead of train::train_step,
// through the PJRT plugin `plugin` (cpu, cuda, tpu or a path); custom_kernels: its
// compile.custom_kernels (titan's splash kernels inside the program).
json titan_round(const Config& c, const std::string& attention, const std::string& ac_mode, bool bf16,
                 bool graph, const std::string& plugin, bool custom_kernels, int warmup, int steps) {
  const titan::AutocastGuard precision(bf16 ? titan::kBF16 : titan::kF32);
  llama3::ModelArgs args = model_args(c);
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<int64_t> token(0, c.vocab_size - 1);
  std::vector<int64_t> tokens(static_cast<size_t>(c.batch * (c.seq + 1)));
  for (int64_t& t : tokens) t = token(rng);
  std::vector<int64_t> inputs, labels;
  for (int64_t b = 0; b < c.batch; ++b) {
    auto row = tokens.begin() + b * (c.seq + 1);
    inputs.insert(inputs.end(), row, row + c.seq);
    labels.insert(labels.end(), row + 1, row + c.seq + 1);
  }
  titan::data::Batch batch{Tensor::from_vector(inputs, {c.batch, c.seq}),
                           Tensor::from_vector(labels, {c.batch, c.seq})};

  const int64_t rss_baseline = bench::status_bytes("VmRSS");
  titan::Generator gen(kSeed);
  TITAN_CHECK(attention == "splash" || attention == "reference",
              "bench_train_step: --attention is splash or reference, got '", attention, "'");
  auto model = std::make_shared<llama3::Transformer>(
      args, titan::TensorOptions{}, llama3::AttentionKernel{.splash = attention == "splash"});
  model->init_weights(gen);
  llama3::parallelize(*model, {.activation_checkpoint_mode = ac_mode});
  auto named = model->named_parameters();
  std::vector<Tensor> params;
  for (auto& [n, p] : named) params.push_back(p);
  titan::optim::AdamW optimizer(
      named, {.lr = kLr, .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps, .weight_decay = kWeightDecay});
  // Before init's temporaries are handed back: the device copies of the parameters and moments are
  // the step's memory, as the host ones are in eager mode.
  std::optional<titan::train::GraphStep> graph_step;
  if (graph)
    graph_step.emplace(*model, optimizer, named,
                       titan::train::GraphStepOptions{.runtime = {.plugin = plugin,
                                                                  .xla_options = titan::graph::parse_xla_options(
                                                                      g_xla_options, "--xla_options")},
                                                      .max_norm = kMaxNorm,
                                                      .scan_layers = true,
                                                      .scan_saves = titan::train::scan_saves_for({.mode = ac_mode}),
                                                      .custom_kernels = custom_kernels,
                                                      .cudnn_attention = g_cudnn_attention},
                       std::cerr);
  titan::CpuAllocator::instance().empty_cache();
  titan::release_free_memory();

  std::vector<double> seconds, losses;
  double first_step_seconds = 0;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) {
      bench::reset_peak_rss();
      titan::CpuAllocator::instance().reset_peak();
    }
    auto t0 = std::chrono::steady_clock::now();
    const double loss =
        graph_step
            ? graph_step->run({batch}).loss
            : titan::train::train_step(*model, optimizer, params, kMaxNorm, 1, [&] { return batch; }).loss;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) seconds.push_back(dt);
    if (i == 0) first_step_seconds = dt;
    losses.push_back(loss);
    std::cerr << (graph ? "titan graph  step " : "titan  step ") << i + 1 << ": " << bench::fixed(dt * 1e3, 0)
              << " ms, loss " << bench::fixed(loss, 4) << "\n";
  }
  titan::MemoryStats mem = titan::CpuAllocator::instance().stats();
  json reply = {{"step_seconds", seconds},
                {"first_step_seconds", first_step_seconds},
                {"losses", losses},
                {"rss_baseline", rss_baseline},
                {"rss_peak", bench::status_bytes("VmHWM")},
                {"alloc_peak", mem.peak_allocated_bytes},
                {"alloc_reserved", mem.reserved_bytes}};
  if (graph_step) {
    reply["compile_seconds"] = graph_step->last_compile_seconds();
    reply["device"] = graph_step->runner().describe();
    const auto device_memory = graph_step->runner().client().memory_stats();
    if (device_memory && device_memory->peak_bytes_in_use)
      reply["device_peak_bytes"] = *device_memory->peak_bytes_in_use;
  }
  // After the memory figures: its buffers are not the step's.
  if (ac_mode == "none" && !graph) reply["linear_gemm_seconds"] = linear_gemm_seconds(c);
  return reply;
}

std::string self_path() {
  std::vector<char> buf(4096);
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  TITAN_CHECK(n > 0, "bench_train_step: cannot read /proc/self/exe to start its worker processes");
  return std::string(buf.data(), static_cast<size_t>(n));
}

// mode: "eager" (train::train_step), "graph" (train::GraphStep through PJRT plugin `plugin`) or
// "graph_xla" (GraphStep with compile.custom_kernels = false).
json run_titan_round(const Config& c, const std::string& mode, const std::string& attention,
                     const std::string& ac_mode, bool bf16, int threads, int warmup, int steps,
                     const std::string& plugin = "cpu") {
  std::string command = "OMP_NUM_THREADS=" + std::to_string(threads) + " " + bench::shell_quote(self_path()) +
                        " --worker --mode=" + mode + " --plugin=" + bench::shell_quote(plugin) +
                        " --xla_options=" + bench::shell_quote(g_xla_options) +
                        (g_cudnn_attention ? "" : " --cudnn_attention=false") + " --config=" + c.name + " --attention=" + attention + " --ac=" + ac_mode +
                        " --precision=" + (bf16 ? "bf16" : "f32") + " --warmup=" + std::to_string(warmup) +
                        " --steps=" + std::to_string(steps);
  return bench::run_for_json(bench::with_malloc_tunables(command));
}

// What bench/train_step_torch.py and bench/train_step_jax.py read. device: "cpu", or the
// accelerator that --device names ("cuda").
json script_request(const Config& c, const std::string& variant, int threads, int warmup, int steps,
                    const std::string& device) {
  return {{"threads", threads},
          {"device", device},
          {"warmup", warmup},
          {"steps", steps},
          {"seed", kSeed},
          {"variant", variant},
          {"config",
           {{"dim", c.dim},
            {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"n_kv_heads", c.n_kv_heads},
            {"ffn_dim", c.ffn_dim},
            {"vocab_size", c.vocab_size},
            {"seq", c.seq},
            {"batch", c.batch}}}};
}

json run_torch_round(const Config& c, const std::string& variant, int threads, int warmup, int steps,
                     const std::string& device = "cpu") {
  return bench::run_torch_script("train_step_torch.py",
                                 script_request(c, variant, threads, warmup, steps, device));
}

// variant: "f32" or "bf16".
json run_jax_round(const Config& c, const std::string& variant, int threads, int warmup, int steps,
                   const std::string& device = "cpu") {
  return bench::run_python_script(bench::jax_python_path(), "train_step_jax.py",
                                  script_request(c, variant, threads, warmup, steps, device));
}

// A compiled round whose first step (compilation included) takes longer than this makes the
// config's remaining compiled rounds, and the larger configs', be skipped: on a few cores
// inductor's compile of a large model can take longer than all the other rounds together.
constexpr double kCompileBudgetSeconds = 150;

// PyTorch's variants here (bench/train_step_torch.py): bench::kTorchAll's, plus "compile model",
// torch.compile(model) of the whole model, which runs a one-device step faster than compiling each
// block ("compile", TorchTitan's way, which FSDP needs).
const std::vector<std::string> kTrainStepTorch = {"eager",      "compile",      "compile model",
                                                  "eager bf16", "compile bf16", "compile model bf16"};
constexpr double kMiB = 1024.0 * 1024.0;

// The rounds of one side of one config.
struct Side {
  std::vector<json> rounds;
  std::vector<std::string> errors;

  void add(json reply) {
    if (reply.contains("error"))
      errors.push_back(reply["error"].get<std::string>());
    else
      rounds.push_back(std::move(reply));
  }
  bool ok() const { return !rounds.empty(); }
  // Median step time over every timed step of every round.
  double step_seconds() const {
    std::vector<double> all;
    for (const json& r : rounds)
      for (const json& s : r["step_seconds"]) all.push_back(s.get<double>());
    return bench::median(all);
  }
  std::vector<double> round_step_seconds() const {
    std::vector<double> out;
    for (const json& r : rounds) out.push_back(bench::median(r["step_seconds"].get<std::vector<double>>()));
    return out;
  }
  double median_of(const std::function<double(const json&)>& f) const {
    std::vector<double> v;
    for (const json& r : rounds) v.push_back(f(r));
    return bench::median(v);
  }
  double rss_growth() const {
    return median_of(
        [](const json& r) { return r["rss_peak"].get<double>() - r["rss_baseline"].get<double>(); });
  }
  double rss_peak() const {
    return median_of([](const json& r) { return r["rss_peak"].get<double>(); });
  }
  double alloc_peak() const {
    return median_of([](const json& r) { return r["alloc_peak"].get<double>(); });
  }
  std::optional<double> linear_gemm_seconds() const {
    if (!ok() || !rounds.front().contains("linear_gemm_seconds")) return std::nullopt;
    return median_of([](const json& r) { return r["linear_gemm_seconds"].get<double>(); });
  }
  double first_loss() const { return rounds.front()["losses"][0].get<double>(); }
  // The first step's time over a timed step's (median over rounds): what compiling the step cost
  // a side that compiles in its first step, measured the same way on each.
  double compile_overhead() const {
    return median_of([](const json& r) {
      return r["first_step_seconds"].get<double>() -
             bench::median(r["step_seconds"].get<std::vector<double>>());
    });
  }
};

struct Result {
  const Config* config;
  titan::models::ModelSummary summary;
  Side titan, titan_ac_full, titan_graph;
  std::map<std::string, Side> torch;  // by variant
  std::map<std::string, Side> jax;    // by variant: f32, bf16
};

std::vector<std::string> comma_list(const std::string& v) {
  std::vector<std::string> out;
  std::istringstream list(v);
  for (std::string name; std::getline(list, name, ',');) out.push_back(name);
  return out;
}

std::optional<double> ratio(const std::optional<double>& num, const std::optional<double>& den) {
  return num && den ? std::optional(*num / *den) : std::nullopt;
}

std::string ratio_cell(const std::optional<double>& num, const std::optional<double>& den) {
  const auto r = ratio(num, den);
  return r ? bench::fixed(*r, 2) + "x" : std::string("n/a");
}

// A target's verdict line; "NOT MEASURED" where a side did not run.
std::string target_line(const std::string& what, const std::optional<double>& ratio, double at_least) {
  if (!ratio) return "target " + what + ": NOT MEASURED";
  return "target " + what + ": " + bench::fixed(*ratio, 2) + "x " + (*ratio >= at_least ? "MET" : "MISSED");
}

// titan's graph mode (the whole step one XLA program, run through a PJRT plugin) against titan
// eager, JAX (XLA too, driven from Python: what graph mode has to match) and the best torch
// variant. Adds graph mode's targets to `verdicts`.
bench::Table graph_table(const std::vector<Result>& results, bool bf16, int rounds,
                         const std::string& jax_skipped, std::vector<std::string>& verdicts,
                         std::string& xla_versions) {
  const std::string headline = bf16 ? "bf16" : "f32";
  bench::Table t{
      .title = "Llama 3 training step, titan graph mode " + headline +
               " (train::GraphStep: the step as one XLA program through PJRT), tokens/s (median step "
               "over " +
               std::to_string(rounds) + " interleaved rounds per side, each in a fresh process)",
      .unit = "tokens/s",
      .titan_label = "titan graph",
      .reference_label = "",
      .variants = {},
      .higher_is_better = true,
      .titan_bf16 = bf16,
      .extra_headers = {"titan eager", "JAX f32", "JAX bf16", "best torch", "graph/eager",
                        "graph/JAX " + headline, "graph compile s", "JAX compile s"},
      .rows = {},
      .notes = {}};
  std::string titan_xla = "titan graph: no round ran",
              jax_xla = "JAX: " + (jax_skipped.empty() ? "no round ran" : jax_skipped);
  for (const Result& r : results) {
    const Config& c = *r.config;
    const double tokens = static_cast<double>(c.batch * c.seq);
    auto tps = [&](const Side* side) {
      return side && side->ok() ? std::optional(tokens / side->step_seconds()) : std::nullopt;
    };
    auto jax_side = [&](const std::string& v) { return r.jax.count(v) ? &r.jax.at(v) : nullptr; };
    auto figure = [](const std::optional<double>& v) { return v ? bench::fixed(*v, 1) : std::string("n/a"); };
    bench::Row torch_row{.name = c.name, .titan = {}, .torch = {}, .extra = {}};
    for (const auto& [variant, side] : r.torch)
      if (side.ok()) torch_row.torch[variant] = tokens / side.step_seconds();
    const auto best = bf16 ? bench::best_any(torch_row) : bench::best_f32(torch_row);
    const std::optional<double> graph = tps(&r.titan_graph), eager = tps(&r.titan),
                                jax = tps(jax_side(headline));
    auto compile = [](const Side* side) {
      return side && side->ok() ? bench::fixed(side->compile_overhead(), 1) : std::string("n/a");
    };
    t.rows.push_back({.name = c.name,
                      .titan = graph,
                      .torch = {},
                      .extra = {figure(eager), figure(tps(jax_side("f32"))), figure(tps(jax_side("bf16"))),
                                best ? bench::fixed(best->second, 1) + " (" + best->first + ")" : "n/a",
                                ratio_cell(graph, eager), ratio_cell(graph, jax), compile(&r.titan_graph),
                                compile(jax_side(headline))}});

    std::string losses = c.name + ": first-step loss";
    if (r.titan_graph.ok()) losses += " titan graph " + bench::fixed(r.titan_graph.first_loss(), 3) + ",";
    for (const auto& [variant, side] : r.jax)
      if (side.ok()) losses += " JAX " + variant + " " + bench::fixed(side.first_loss(), 3) + ",";
    t.notes.push_back(losses + " ln vocab " + bench::fixed(std::log(static_cast<double>(c.vocab_size)), 3) +
                      " (titan eager's and torch's: under the first table)");
    std::string own = c.name + ": compile as each side times it (median over rounds):";
    if (r.titan_graph.ok() && r.titan_graph.rounds.front().contains("compile_seconds"))
      own +=
          " titan GraphStep::last_compile_seconds " +
          bench::fixed(
              r.titan_graph.median_of([](const json& j) { return j["compile_seconds"].get<double>(); }), 2) +
          " s;";
    for (const auto& [variant, side] : r.jax)
      if (side.ok())
        own += " JAX " + variant + " lower + compile " +
               bench::fixed(side.median_of([](const json& j) { return j["compile_seconds"].get<double>(); }),
                            2) +
               " s;";
    t.notes.push_back(own);
    if (r.titan_graph.ok() && r.titan.ok())
      t.notes.push_back(c.name + ": RSS growth of the timed steps (as in the memory table): titan graph " +
                        bench::fixed(r.titan_graph.rss_growth() / kMiB, 1) + " MiB, titan eager " +
                        bench::fixed(r.titan.rss_growth() / kMiB, 1) +
                        " MiB (graph's layer loop keeps every block's residuals, as eager does without "
                        "activation checkpointing)");
    for (const std::string& e : r.titan_graph.errors)
      t.notes.push_back("titan graph failed on " + c.name + ": " + e);
    for (const auto& [variant, side] : r.jax)
      for (const std::string& e : side.errors)
        t.notes.push_back("JAX " + variant + " failed on " + c.name + ": " + e);
    if (r.titan_graph.ok())
      titan_xla = "titan graph: " + r.titan_graph.rounds.front().value("device", std::string("?"));
    if (const Side* j = jax_side(headline); j && j->ok()) {
      const json& reply = j->rounds.front();
      jax_xla = "JAX " + reply.value("jax_version", std::string("?")) + ", jaxlib " +
                reply["xla"].value("jaxlib", std::string("?")) + " (its XLA built in; platform " +
                reply["xla"].value("platform", std::string("?")) + " " +
                reply["xla"].value("platform_version", std::string("?")) + "), " +
                std::to_string(reply.value("threads", 0)) + " CPUs";
    }

    verdicts.push_back(
        target_line(c.name + ": titan graph >= JAX " + headline + " tokens/s", ratio(graph, jax), 1.0));
    // Issue 18 sets this target in float32, where both sides run float32 GEMMs; in bf16 titan eager
    // runs oneDNN's (AMX where the CPU has it), and the table's graph/eager column says how far apart.
    if (!bf16 && (c.name == "M" || c.name == "L"))
      verdicts.push_back(
          target_line(c.name + ": titan graph >= 0.9x titan eager f32 tokens/s", ratio(graph, eager), 0.9));
  }
  t.notes.push_back(
      "graph: train::GraphStep runs forward, loss, backward, clipping and AdamW as one compiled XLA program; "
      "JAX: bench/train_step_jax.py, the same step in plain JAX, jax.jit whole with donated parameters and "
      "optimizer state, layers under lax.scan; bf16: matmul operands bf16, f32 accumulation and master "
      "weights. "
      "JAX's other precision runs in round 1 only (information). best torch: the best torch " +
      std::string(bf16 ? "variant of any precision" : "f32 variant") +
      " of the first table. compile s: the first step's time minus the median timed step's.");
  xla_versions = "XLA: " + titan_xla + "; " + jax_xla;
  return t;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  f >> one >> five >> fifteen;
  return bench::fixed(one, 2) + ", " + bench::fixed(five, 2) + ", " + bench::fixed(fifteen, 2);
}

std::string flag_value(const std::string& arg, const std::string& key) {
  return arg.rfind(key + "=", 0) == 0 ? arg.substr(key.size() + 1) : std::string();
}

int worker_main(int argc, char** argv) {
  std::string config, attention = "splash", ac = "none", mode = "eager", plugin = "cpu";
  bool bf16 = false;
  int warmup = 1, steps = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (auto v = flag_value(a, "--config"); !v.empty()) config = v;
    if (auto v = flag_value(a, "--ac"); !v.empty()) ac = v;
    if (auto v = flag_value(a, "--mode"); !v.empty()) mode = v;
    if (auto v = flag_value(a, "--plugin"); !v.empty()) plugin = v;
    if (auto v = flag_value(a, "--xla_options"); !v.empty()) g_xla_options = v;
    if (a == "--cudnn_attention=false") g_cudnn_attention = false;
    if (auto v = flag_value(a, "--attention"); !v.empty()) attention = v;
    if (auto v = flag_value(a, "--precision"); !v.empty()) bf16 = v == "bf16";
    if (auto v = flag_value(a, "--warmup"); !v.empty()) warmup = std::stoi(v);
    if (auto v = flag_value(a, "--steps"); !v.empty()) steps = std::stoi(v);
  }
  try {
    TITAN_CHECK(mode == "eager" || mode == "graph" || mode == "graph_xla",
                "bench_train_step: --mode is eager, graph or graph_xla, got '", mode, "'");
    std::cout << titan_round(config_named(config), attention, ac, bf16, mode != "eager", plugin, mode == "graph",
                             warmup, steps)
                     .dump()
              << "\n";
  } catch (const std::exception& e) {
    std::cout << json{{"error", e.what()}}.dump() << "\n";
  }
  return 0;
}

std::string per_round(const std::vector<double>& step_seconds, double tokens) {
  std::string s;
  for (double t : step_seconds) {
    if (!s.empty()) s += ' ';
    s += bench::fixed(tokens / t, 0);
  }
  return s;
}

// --device=cuda: the step on an accelerator, where titan runs graph mode only (its eager engine is
// the CPU's). titan graph (through the PJRT plugin of that name), JAX (jax.jit on the same
// device) and PyTorch 2 (every --torch variant, on the same device) in alternating rounds, in both
// precisions: one table per precision, titan against torch's variants of that precision (bf16:
// against every variant), with JAX's figure, compile times and device memory peaks beside.
int device_main(const std::string& device, const std::vector<const Config*>& chosen, int rounds,
                const std::vector<std::string>& variants, const std::vector<std::string>& jax_variants,
                const std::string& jax_skipped, const std::optional<int>& steps_override,
                const std::string& attention, const std::vector<std::string>& precisions) {
  const int threads = titan::num_threads();
  std::cout << bench::machine_summary() << "; load average " << loadavg() << "\n" << std::flush;
  if (!g_xla_options.empty()) std::cout << "titan graph: XLA options " << g_xla_options << "\n";
  if (!g_cudnn_attention) std::cout << "titan graph: compile.cudnn_attention = false (XLA's attention)\n";
  struct DeviceResult {
    const Config* config;
    titan::models::ModelSummary summary;
    std::map<std::string, Side> titan, jax, torch;  // titan and jax by precision, torch by variant
  };
  std::vector<DeviceResult> results;
  for (const Config* c : chosen) {
    DeviceResult r{c, llama3::summarize(model_args(*c), c->seq), {}, {}, {}};
    const int steps = steps_override.value_or(c->steps);
    std::cout << "\n== config " << c->name << " on " << device << ": " << r.summary.description << "; seq "
              << c->seq << ", batch " << c->batch << "; " << rounds << " rounds of " << c->warmup
              << " warm-up + " << steps << " timed steps per side\n"
              << std::flush;
    for (int round = 1; round <= rounds; ++round) {
      for (const std::string& precision : precisions) {
        std::cout << "round " << round << ": titan graph " << precision << "\n" << std::flush;
        r.titan[precision].add(run_titan_round(*c, "graph", attention, "none", precision == "bf16", threads,
                                               c->warmup, steps, device));
      }
      for (const std::string& variant : jax_variants) {
        std::cout << "round " << round << ": jax " << variant << "\n" << std::flush;
        r.jax[variant].add(run_jax_round(*c, variant, threads, c->warmup, steps, device));
      }
      for (const std::string& variant : variants) {
        std::cout << "round " << round << ": torch " << variant << "\n" << std::flush;
        r.torch[variant].add(run_torch_round(*c, variant, threads, c->warmup, steps, device));
      }
    }
    results.push_back(std::move(r));
  }

  std::string titan_about = "titan graph: no round ran",
              jax_about = "JAX: " + (jax_skipped.empty() ? "no round ran" : jax_skipped);
  bench::TorchResults torch_about;
  std::vector<std::string> verdicts;
  auto gib = [](double bytes) { return bench::fixed(bytes / (1024.0 * 1024.0 * 1024.0), 2); };
  for (const std::string& precision : precisions) {
    const bool bf16 = precision == "bf16";
    bench::Table t{.title = "Llama 3 training step on " + device + ", " + precision +
                            ": titan graph mode vs PyTorch 2 and JAX, tokens/s (median step over " +
                            std::to_string(rounds) + " interleaved rounds per side, each in a fresh process)",
                   .unit = "tokens/s",
                   .titan_label = "titan graph",
                   .variants = variants,
                   .titan_bf16 = bf16,
                   .extra_headers = {"JAX " + precision, "graph/JAX", "titan MFU", "titan compile s",
                                     "JAX compile s", "titan peak GiB", "JAX peak GiB", "torch peak GiB"},
                   .rows = {},
                   .notes = {}};
    for (const DeviceResult& r : results) {
      const Config& c = *r.config;
      const double tokens = static_cast<double>(c.batch * c.seq);
      const Side* titan = r.titan.count(precision) ? &r.titan.at(precision) : nullptr;
      const Side* jax = r.jax.count(precision) ? &r.jax.at(precision) : nullptr;
      auto tps = [&](const Side* side) {
        return side && side->ok() ? std::optional(tokens / side->step_seconds()) : std::nullopt;
      };
      auto cell = [](const Side* side, const char* key, const std::function<std::string(double)>& f) {
        if (!side || !side->ok() || !side->rounds.front().contains(key)) return std::string("n/a");
        return f(side->median_of([&](const json& j) { return j[key].get<double>(); }));
      };
      bench::Row row{.name = c.name, .titan = tps(titan), .torch = {}, .extra = {}};
      const Side* least_torch = nullptr;
      for (const auto& [variant, side] : r.torch) {
        if (!side.ok()) continue;
        row.torch[variant] = tokens / side.step_seconds();
        if (side.rounds.front().contains("device_peak_bytes") &&
            (!least_torch || side.median_of([](const json& j) {
              return j["device_peak_bytes"].get<double>();
            }) < least_torch->median_of([](const json& j) { return j["device_peak_bytes"].get<double>(); })))
          least_torch = &side;
      }
      // MFU against the H100/H200 datasheet's dense rate of the precision (bf16 989.5 TFLOP/s;
      // f32 without TF32 66.9): a reference figure, not a measured peak.
      const double peak = bf16 ? 989.5e12 : 66.9e12;
      row.extra = {
          tps(jax) ? bench::fixed(*tps(jax), 1) : "n/a",
          ratio_cell(row.titan, tps(jax)),
          row.titan ? bench::fixed(100 * *row.titan * r.summary.flops_per_token / peak, 1) + "%" : "n/a",
          titan && titan->ok() ? bench::fixed(titan->compile_overhead(), 1) : "n/a",
          cell(jax, "compile_seconds", [](double v) { return bench::fixed(v, 1); }),
          cell(titan, "device_peak_bytes", gib),
          cell(jax, "device_peak_bytes", gib),
          cell(least_torch, "device_peak_bytes", gib)};
      t.rows.push_back(row);
      t.notes.push_back(c.name + ": " + r.summary.description + "; seq " + std::to_string(c.seq) +
                        ", batch " + std::to_string(c.batch) + " (" + bench::fixed(tokens, 0) +
                        " tokens/step); " + bench::fixed(r.summary.flops_per_token / 1e6, 1) +
                        " MFLOP/token");
      std::string losses = c.name + ": first-step loss";
      if (titan && titan->ok()) losses += " titan " + bench::fixed(titan->first_loss(), 3) + ",";
      if (jax && jax->ok()) losses += " JAX " + bench::fixed(jax->first_loss(), 3) + ",";
      for (const auto& [variant, side] : r.torch)
        if (side.ok() && bench::is_f32(variant) != bf16)
          losses += " torch " + variant + " " + bench::fixed(side.first_loss(), 3) + ",";
      t.notes.push_back(losses + " ln vocab " + bench::fixed(std::log(static_cast<double>(c.vocab_size)), 3));
      if (titan)
        for (const std::string& e : titan->errors)
          t.notes.push_back("titan graph failed on " + c.name + ": " + e);
      if (jax)
        for (const std::string& e : jax->errors) t.notes.push_back("JAX failed on " + c.name + ": " + e);
      if (titan && titan->ok())
        titan_about = "titan graph: " + titan->rounds.front().value("device", std::string("?"));
      if (jax && jax->ok()) {
        const json& reply = jax->rounds.front();
        jax_about = "JAX " + reply.value("jax_version", std::string("?")) + " (platform " +
                    reply["xla"].value("platform", std::string("?")) + " " +
                    reply["xla"].value("platform_version", std::string("?")) + "; " + precision +
                    " attention " + reply.value("attention", std::string("?")) + ")";
      }
      verdicts.push_back(
          target_line(c.name + " " + precision + " on " + device + ": titan graph >= JAX tokens/s",
                      ratio(row.titan, tps(jax)), 1.0));
      const auto best = bf16 ? bench::best_any(row) : bench::best_f32(row);
      if (best)
        verdicts.push_back(target_line(c.name + " " + precision + " on " + device +
                                           ": titan graph >= the best torch variant (" + best->first + ")",
                                       ratio(row.titan, best->second), 1.0));
    }
    t.notes.push_back(
        "titan graph: train::GraphStep, the whole step one XLA program through the PJRT plugin (f32 "
        "matmuls at precision HIGHEST: no TF32); JAX: bench/train_step_jax.py, jax.jit whole (f32 at "
        "matmul precision highest; each block recomputed in the backward, jax.checkpoint, as titan's scan "
        "does); torch: bench/train_step_torch.py on the device (eager; compile = torch.compile per block; "
        "compile model = torch.compile of the whole model; bf16 = autocast). peak GiB: the device "
        "allocator's high-water mark (PJRT memory stats, JAX memory_stats, torch.cuda.max_memory_allocated; "
        "torch: its least variant). MFU: model FLOPs over the datasheet dense rate of the precision.");
    for (const DeviceResult& r : results)
      for (const auto& [variant, side] : r.torch) {
        for (const std::string& e : side.errors)
          torch_about.errors["train_step/" + r.config->name + " [" + variant + "]"] = e;
        if (side.ok() && !torch_about.available) {
          torch_about.available = true;
          torch_about.about = bench::describe_torch(side.rounds.front()) + "; " +
                              side.rounds.front().value("device_name", std::string("?"));
        }
      }
    if (!torch_about.available) torch_about.about = "PyTorch reference unavailable";
    bench::print_table(t, torch_about);
  }
  std::cout << "\nXLA: " << titan_about << "; " << jax_about << "\n";
  for (const std::string& v : verdicts) std::cout << v << "\n";
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--worker") return worker_main(argc, argv);
  bench::use_this_cpus_blas_kernels(argv);

  // --benchmark_filter (as scripts/run_benchmarks.sh passes it to every benchmark) picks configs
  // by "train_step/<S|M|L>"; --rounds=N and --steps=N override the defaults; --no_ac skips the
  // activation-checkpointing rounds; --attention=reference runs titan with the attention that
  // materialises the scores (splash, titan's default, never does); --torch=eager,compile picks
  // PyTorch's variants (default: all of kTrainStepTorch); --precision=bf16 runs titan as
  // training.mixed_precision_param = "bfloat16" does, against the best of every PyTorch variant
  // (f32 and bf16), with its share of the measured bf16 GEMM peak. Every round also runs titan's
  // graph mode (train::GraphStep) in titan's precision, and JAX (bench/train_step_jax.py) in each
  // precision --jax=f32,bf16 names (default both; --jax=none: neither). --custom_kernels=false
  // runs graph mode with compile.custom_kernels = false (XLA's attention instead of titan's);
  // --xla_options=TEXT compiles it with XLA's options, as compile.xla_options does;
  // --cudnn_attention=false compiles it with compile.cudnn_attention = false.
  // --device=cuda runs the step on that accelerator instead (device_main): titan graph, JAX and
  // torch there, configs XL and 3B unless --benchmark_filter names others, both precisions unless
  // --precision names one.
  int rounds = 3;
  std::vector<std::string> variants = kTrainStepTorch;
  std::vector<std::string> jax_variants = {"f32", "bf16"};
  std::string attention = "splash";
  std::optional<int> steps_override;
  bool with_ac = true, bf16 = false, precision_given = false;
  std::string graph_mode = "graph";  // --custom_kernels=false: "graph_xla", XLA's lowering of every op
  // --device=cuda runs device_main instead; its default configs add XL.
  std::string device = "cpu";
  std::optional<std::regex> filter;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (auto v = flag_value(a, "--benchmark_filter"); !v.empty()) filter = std::regex(v);
    if (auto v = flag_value(a, "--device"); !v.empty()) device = v;
    if (auto v = flag_value(a, "--rounds"); !v.empty()) rounds = std::max(1, std::stoi(v));
    if (auto v = flag_value(a, "--steps"); !v.empty()) steps_override = std::max(1, std::stoi(v));
    if (a == "--no_ac") with_ac = false;
    if (a == "--custom_kernels=false") graph_mode = "graph_xla";
    if (a == "--cudnn_attention=false") g_cudnn_attention = false;
    if (auto v = flag_value(a, "--xla_options"); !v.empty()) g_xla_options = v;
    if (auto v = flag_value(a, "--precision"); !v.empty()) {
      TITAN_CHECK(v == "f32" || v == "bf16", "bench_train_step: --precision is f32 or bf16, got '", v, "'");
      bf16 = v == "bf16";
      precision_given = true;
    }
    if (auto v = flag_value(a, "--attention"); !v.empty()) attention = v;
    if (auto v = flag_value(a, "--torch"); !v.empty()) {
      variants = v == "none" ? std::vector<std::string>{} : comma_list(v);
      for (const std::string& t : variants)
        TITAN_CHECK(std::find(kTrainStepTorch.begin(), kTrainStepTorch.end(), t) != kTrainStepTorch.end(),
                    "bench_train_step: --torch takes PyTorch's variants, comma-separated, out of \"eager\", "
                    "\"compile\", \"compile model\", \"eager bf16\", \"compile bf16\" and \"compile model "
                    "bf16\", or none; got '",
                    t, "' in '", v, "'");
    }
    if (auto v = flag_value(a, "--jax"); !v.empty()) {
      jax_variants = v == "none" ? std::vector<std::string>{} : comma_list(v);
      for (const std::string& j : jax_variants)
        TITAN_CHECK(j == "f32" || j == "bf16",
                    "bench_train_step: --jax takes f32, bf16 or both (comma-separated), "
                    "or none; got '",
                    j, "' in '", v, "'");
    }
  }
  // Without JAX's venv the other sides still run; the graph table says why JAX's columns are empty.
  std::string jax_skipped;
  if (!jax_variants.empty() && access(bench::jax_python_path().c_str(), X_OK) != 0) {
    jax_skipped = "skipped: no Python interpreter at " + bench::jax_python_path() +
                  " (run scripts/setup_jax.sh, as make bench does, or set TITAN_JAX_PYTHON)";
    std::cout << "JAX reference " << jax_skipped << "\n";
    jax_variants.clear();
  }
  if (!filter) filter = std::regex(device == "cpu" ? "train_step/(S|M|L)$" : "train_step/(XL|3B)$");
  std::vector<const Config*> chosen;
  for (const Config& c : configs())
    if (std::regex_search("train_step/" + c.name, *filter)) chosen.push_back(&c);
  if (chosen.empty()) {
    std::cout << "bench_train_step: no config matches the filter (names: train_step/S, train_step/M, "
                 "train_step/L, train_step/XL, train_step/3B)\n";
    return 0;
  }
  if (device != "cpu")
    return device_main(device, chosen, rounds, variants, jax_variants, jax_skipped, steps_override, attention,
                       precision_given ? std::vector<std::string>{bf16 ? "bf16" : "f32"}
                                       : std::vector<std::string>{"f32", "bf16"});

  const int threads = titan::num_threads();
  const std::string load_start = loadavg();
  // Before mark_start: over an empty window the share of other processes means nothing.
  std::cout << bench::machine_summary() << "; load average " << load_start << "\n" << std::flush;
  if (!g_xla_options.empty()) std::cout << "titan graph: XLA options " << g_xla_options << "\n";
  bench::mark_start();
  const titan::DType precision = bf16 ? titan::kBF16 : titan::kF32;
  // The name of the peak that %peak is a share of, for either side: titan's GEMM kernels' rate in
  // the precision titan runs.
  const std::string peak_name = bf16 ? "bf16 GEMM" : "SGEMM";
  const double sgemm_start = titan::train::measure_peak_flops(precision);
  const std::string blas_kernels = bf16 ? "bf16 GEMMs: oneDNN " + titan::kernels::cpu::onednn_version() +
                                              " on " + titan::kernels::cpu::onednn_bf16_isa() +
                                              " (f32: " + bench::blas_kernels_summary() + ")"
                                        : bench::blas_kernels_summary();
  std::cout << peak_name << " 2048^3 (kernels::cpu::gemm, best of 5): " << bench::fixed(sgemm_start / 1e9, 1)
            << " GFLOP/s; " << blas_kernels << "\n"
            << std::flush;

  std::vector<Result> results;
  std::vector<std::string> compile_notes;
  std::optional<std::string> compile_skipped;  // why compiled rounds stopped, once they have
  for (const Config* c : chosen) {
    Result r{c, llama3::summarize(model_args(*c), c->seq), {}, {}, {}, {}, {}};
    const int steps = steps_override.value_or(c->steps);
    std::cout << "\n== config " << c->name << ": " << r.summary.description << "; seq " << c->seq
              << ", batch " << c->batch << "; " << rounds << " rounds of " << c->warmup << " warm-up + "
              << steps << " timed steps per side\n"
              << std::flush;
    for (int round = 1; round <= rounds; ++round) {
      std::cout << "round " << round << ": titan\n" << std::flush;
      r.titan.add(run_titan_round(*c, "eager", attention, "none", bf16, threads, c->warmup, steps));
      std::cout << "round " << round << ": titan graph\n" << std::flush;
      r.titan_graph.add(run_titan_round(*c, graph_mode, attention, "none", bf16, threads, c->warmup, steps));
      for (const std::string& variant : variants) {
        const bool compiled = variant.rfind("compile", 0) == 0;
        if (compiled && compile_skipped) continue;
        // Against titan f32, bf16 figures are information, not the headline: one round each keeps
        // the run short. Against titan bf16 they are the headline.
        if (!bf16 && !bench::is_f32(variant) && round > 1) continue;
        std::cout << "round " << round << ": torch " << variant << "\n" << std::flush;
        json reply = run_torch_round(*c, variant, threads, c->warmup, steps);
        if (compiled && reply.contains("first_step_seconds")) {
          const double first = reply["first_step_seconds"].get<double>();
          compile_notes.push_back(c->name + " round " + std::to_string(round) + " " + variant +
                                  ": first step " + bench::fixed(first, 1) +
                                  " s (compiles forward and backward; a warm-up step)");
          if (first > kCompileBudgetSeconds)
            compile_skipped = "torch.compile skipped after config " + c->name + " round " +
                              std::to_string(round) + " (" + variant +
                              "): its first step, the compilation, took " + bench::fixed(first, 0) +
                              " s, over the budget of " + bench::fixed(kCompileBudgetSeconds, 0) +
                              " s, so the remaining compiled rounds of this config and all of larger configs "
                              "were not run";
        }
        r.torch[variant].add(std::move(reply));
      }
      for (const std::string& variant : jax_variants) {
        // As with torch: titan's precision is the headline, the other is one round of information.
        if ((variant == "bf16") != bf16 && round > 1) continue;
        std::cout << "round " << round << ": jax " << variant << "\n" << std::flush;
        r.jax[variant].add(run_jax_round(*c, variant, threads, c->warmup, steps));
      }
    }
    if (with_ac) {
      std::cout << "titan, activation_checkpoint full\n" << std::flush;
      r.titan_ac_full.add(run_titan_round(*c, "eager", attention, "full", bf16, threads, c->warmup, 1));
    }
    results.push_back(std::move(r));
  }
  const double sgemm_end = titan::train::measure_peak_flops(precision);
  const double sgemm = std::max(sgemm_start, sgemm_end);

  // The PyTorch side's description, from the first round that ran.
  bench::TorchResults torch_about;
  for (const Result& r : results)
    for (const auto& [variant, side] : r.torch)
      for (const json& t : side.rounds)
        if (!torch_about.available) {
          torch_about.available = true;
          torch_about.about =
              bench::describe_torch(t) + "; optimizer " + t.value("optimizer", std::string("?"));
        }
  if (!torch_about.available) torch_about.about = "PyTorch reference unavailable";
  for (const Result& r : results)
    for (const auto& [variant, side] : r.torch)
      for (const std::string& e : side.errors)
        torch_about.errors["train_step/" + r.config->name + " [" + variant + "]"] = e;

  bench::Table speed{.title = std::string("Llama 3 training step, titan ") + (bf16 ? "bf16" : "f32") +
                              " with " + attention + " attention, tokens/s (median step over " +
                              std::to_string(rounds) +
                              " interleaved rounds per side, each in a fresh process)",
                     .unit = "tokens/s",
                     .variants = variants,
                     .titan_bf16 = bf16,
                     .extra_headers = {"titan ms", "torch ms", "titan GFLOP/s", "torch GFLOP/s",
                                       "titan %" + peak_name, "torch %" + peak_name, "titan tok/s by round",
                                       "torch tok/s by round", "GEMMs ms", "floor ms", "torch/floor"},
                     .rows = {},
                     .notes = {}};
  bench::Table memory{
      .title =
          "Peak memory of the timed steps: RSS growth over the process before the model "
          "(median over rounds)",
      .unit = "MiB",
      .variants = variants,
      .higher_is_better = false,
      .titan_bf16 = bf16,
      .extra_headers = {"titan alloc peak", "titan RSS peak", "torch RSS peak", "16 B x params"},
      .rows = {},
      .notes = {}};
  bench::Table ac{
      .title = "Activation checkpointing in titan: allocator peak of the timed steps",
      .unit = "MiB",
      .titan_label = "AC none",
      .reference_label = "AC full",
      .variants = {""},
      .higher_is_better = false,
      .extra_headers = {"saved", "RSS growth none", "RSS growth full", "full: tokens/s", "full: step time"},
      .rows = {},
      .notes = {}};
  std::vector<std::string> verdicts;
  for (const Result& r : results) {
    const Config& c = *r.config;
    const double tokens = static_cast<double>(c.batch * c.seq);
    const double fpt = r.summary.flops_per_token;
    bench::Row row{.name = c.name, .titan = {}, .torch = {}, .extra = {}};
    std::optional<double> titan_s;
    if (r.titan.ok()) titan_s = r.titan.step_seconds();
    for (const auto& [variant, side] : r.torch)
      if (side.ok()) row.torch[variant] = tokens / side.step_seconds();
    // The best f32 variant stands for torch in the columns after the figures; against titan bf16,
    // the best of every variant.
    const auto best = bf16 ? bench::best_any(row) : bench::best_f32(row);
    const Side* torch_side = best ? &r.torch.at(best->first) : nullptr;
    std::optional<double> torch_s;
    if (torch_side) torch_s = torch_side->step_seconds();
    auto cell = [](const std::optional<double>& v, const std::function<std::string(double)>& f) {
      return v ? f(*v) : std::string("n/a");
    };
    // The causal half of the attention FLOPs in fpt (12 * layers * dim * seq per token).
    const std::optional<double> gemm_s = r.titan.linear_gemm_seconds();
    const double attention_flops = 6.0 * static_cast<double>(c.n_layers * c.dim * c.seq) * tokens;
    std::optional<double> floor_s;
    if (gemm_s) floor_s = *gemm_s + attention_flops / sgemm;
    if (titan_s) row.titan = tokens / *titan_s;
    const std::optional<double> torch_tps = best ? std::optional(best->second) : std::nullopt;
    row.extra = {cell(titan_s, [](double s) { return bench::fixed(s * 1e3, 0); }),
                 cell(torch_s, [](double s) { return bench::fixed(s * 1e3, 0); }),
                 cell(row.titan, [&](double t) { return bench::fixed(t * fpt / 1e9, 1); }),
                 cell(torch_tps, [&](double t) { return bench::fixed(t * fpt / 1e9, 1); }),
                 cell(row.titan, [&](double t) { return bench::fixed(100 * t * fpt / sgemm, 0) + "%"; }),
                 cell(torch_tps, [&](double t) { return bench::fixed(100 * t * fpt / sgemm, 0) + "%"; }),
                 per_round(r.titan.round_step_seconds(), tokens),
                 torch_side ? per_round(torch_side->round_step_seconds(), tokens) : std::string("n/a"),
                 cell(gemm_s, [](double s) { return bench::fixed(s * 1e3, 0); }),
                 cell(floor_s, [](double s) { return bench::fixed(s * 1e3, 0); }),
                 torch_s && floor_s ? bench::fixed(*torch_s / *floor_s, 2) + "x" : std::string("n/a")};
    speed.rows.push_back(row);
    speed.notes.push_back(c.name + ": " + r.summary.description + "; seq " + std::to_string(c.seq) +
                          ", batch " + std::to_string(c.batch) + " (" + bench::fixed(tokens, 0) +
                          " tokens/step); " + bench::fixed(fpt / 1e6, 1) + " MFLOP/token");

    bench::Row mem{.name = c.name, .titan = {}, .torch = {}, .extra = {}};
    if (r.titan.ok()) mem.titan = r.titan.rss_growth() / kMiB;
    for (const auto& [variant, side] : r.torch)
      if (side.ok()) mem.torch[variant] = side.rss_growth() / kMiB;
    const auto least = bench::best_f32(mem, /*higher_is_better=*/false);
    mem.extra = {r.titan.ok() ? bench::mib(r.titan.alloc_peak()) : "n/a",
                 r.titan.ok() ? bench::mib(r.titan.rss_peak()) : "n/a",
                 least ? bench::mib(r.torch.at(least->first).rss_peak()) : "n/a",
                 bench::mib(16.0 * static_cast<double>(r.summary.num_params))};
    memory.rows.push_back(mem);

    if (r.titan.ok() && r.titan_ac_full.ok()) {
      const double none = r.titan.alloc_peak(), full = r.titan_ac_full.alloc_peak();
      ac.rows.push_back(
          {.name = c.name,
           .titan = none / kMiB,
           .torch = {{"", full / kMiB}},
           .extra = {bench::mib(none - full) + " (" + bench::fixed(100 * (none - full) / none, 0) + "%)",
                     bench::mib(r.titan.rss_growth()), bench::mib(r.titan_ac_full.rss_growth()),
                     bench::fixed(tokens / r.titan_ac_full.step_seconds(), 1),
                     bench::fixed(r.titan_ac_full.step_seconds() / *titan_s, 2) + "x"}});
    }
    for (const std::string& e : r.titan.errors) verdicts.push_back("titan failed on " + c.name + ": " + e);
    for (const std::string& e : r.titan_ac_full.errors)
      verdicts.push_back("titan (activation_checkpoint full) failed on " + c.name + ": " + e);
    if (r.titan.ok()) {
      std::string losses = c.name + ": first-step loss titan " + bench::fixed(r.titan.first_loss(), 3);
      for (const auto& [variant, side] : r.torch)
        if (side.ok()) losses += ", torch " + variant + " " + bench::fixed(side.first_loss(), 3);
      speed.notes.push_back(losses + " (ln vocab " +
                            bench::fixed(std::log(static_cast<double>(c.vocab_size)), 3) + ")");
    }
    if (bf16 && (c.name == "M" || c.name == "L") && row.titan && best) {
      const double speedup = *row.titan / best->second;
      verdicts.push_back("target " + c.name +
                         " bf16: titan >= 1.3x the best torch tokens/s of any variant (" + best->first +
                         "): " + bench::fixed(speedup, 2) + "x " + (speedup >= 1.3 ? "MET" : "MISSED") +
                         "; titan model FLOP/s " + bench::fixed(100 * *row.titan * fpt / sgemm, 0) +
                         "% of the " + peak_name + " peak");
    }
    if (!bf16 && (c.name == "M" || c.name == "L") && row.titan && best && mem.titan && least) {
      const double speedup = *row.titan / best->second, mem_ratio = *mem.titan / least->second;
      verdicts.push_back("target " + c.name + ": titan >= 1.6x the best torch f32 tokens/s (" + best->first +
                         "): " + bench::fixed(speedup, 2) + "x " + (speedup >= 1.6 ? "MET" : "MISSED") +
                         "; RSS growth <= the least of torch f32's (" + least->first +
                         "): " + bench::fixed(mem_ratio, 2) + "x " + (mem_ratio <= 1.0 ? "MET" : "MISSED"));
    }
    if (!bf16 && c.name == "L" && row.titan) {
      const double share = *row.titan * fpt / sgemm;
      verdicts.push_back("target L: titan >= 70% of SGEMM: " + bench::fixed(100 * share, 0) + "% " +
                         (share >= 0.7 ? "MET" : "MISSED"));
    }
  }
  speed.notes.push_back(
      "FLOPs per token = 6 * non-embedding parameters + 12 * layers * dim * seq "
      "(llama3::summarize). %" +
      peak_name + ": of " + bench::fixed(sgemm / 1e9, 1) + " GFLOP/s, the better of two 2048^3 " + peak_name +
      " measurements (" + bench::fixed(sgemm_start / 1e9, 1) + " before the rounds, " +
      bench::fixed(sgemm_end / 1e9, 1) + " after); " + blas_kernels + ".");
  speed.notes.push_back(
      "step: titan train::train_step (forward, ops::cross_entropy, backward, clip_grad_norm_ 1.0, AdamW), " +
      attention +
      " attention; torch: TorchTitan's Llama 3 (nn.RMSNorm, F.scaled_dot_product_attention is_causal, "
      "F.silu) forward, F.cross_entropy, backward, clip_grad_norm_ 1.0, torch.optim.AdamW (see optimizer "
      "above); compile: torch.compile(block, fullgraph=True) per transformer block, as TorchTitan does; "
      "compile model: torch.compile(model), the whole model, as a user on one device does; "
      "bf16: forward and loss under torch.autocast(\"cpu\", bfloat16). Both lr 8e-4, betas (0.9, 0.95), "
      "weight decay 0.1, one fixed random batch. torch ms, GFLOP/s, %SGEMM, by round, torch/floor: of the "
      "best torch f32 variant. bf16 variants run in round 1 only (information).");
  for (const std::string& n : compile_notes) speed.notes.push_back("torch.compile " + n);
  if (compile_skipped) speed.notes.push_back(*compile_skipped);
  speed.notes.push_back(
      "GEMMs: the step's linear layers alone (ops::linear forward, input and weight gradients, for every "
      "projection and the output head), timed once per titan round after its steps, median. "
      "floor: GEMMs plus attention's causal FLOPs (6 * layers * dim * seq per token, no recomputation) at "
      "the " +
      peak_name +
      " rate: no step made of these GEMMs is faster. torch/floor: the highest titan/torch they leave "
      "room for, with everything else (softmax, norms, loss, AdamW) free.");
  memory.notes = {
      "RSS growth: VmHWM over the timed steps (reset after warm-up) minus VmRSS before the model was built; "
      "both sides release init's temporaries (titan empty_cache and its malloc's free memory, torch gc and "
      "malloc_trim) before step 1. "
      "titan/best f32 below 1: titan uses less than the least of torch's f32 variants. The references run "
      "with GLIBC_TUNABLES (glibc malloc's blocks in transparent huge pages unless set otherwise), so their "
      "RSS moves in 2 MiB steps; titan's malloc is tcmalloc (the machine line names it). "
      "torch.compile's own memory (inductor's code and caches, made in the warm-up step) counts in its "
      "variants' growth.",
      "titan alloc peak: CpuAllocator peak_allocated_bytes over the timed steps (live tensors only). "
      "16 B x params: weights, gradients and both AdamW moments in f32, the floor for either side."};
  ac.notes = {
      "both columns are titan (activation_checkpoint.mode none vs full, one round each for full); "
      "AC none/AC full above 1: full checkpointing needs that many times less. step time: full's over "
      "none's."};
  bench::TorchResults titan_only;
  titan_only.available = true;
  titan_only.about = "activation checkpointing: titan only";

  bench::print_table(speed, torch_about);
  bench::print_table(memory, torch_about);
  if (!ac.rows.empty()) bench::print_table(ac, titan_only);
  bench::TorchResults xla;
  xla.available = true;
  const bench::Table graph = graph_table(results, bf16, rounds, jax_skipped, verdicts, xla.about);
  bench::print_table(graph, xla);
  std::cout << "\n";
  for (const std::string& v : verdicts) std::cout << v << "\n";
  std::cout << "load average " << load_start << " at the start, " << loadavg() << " at the end\n";
  return 0;
}

// A bad flag, or a side that cannot run, ends the benchmark with its message rather than an abort.
int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const titan::Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
