// Graph mode over several devices: the Llama 3 debug model's training step (6 blocks, dim 256,
// vocab 2048, seq 256, 2 sequences per device) split by the [parallelism] layouts over 1, 2 and 4
// CPU devices of one process, at the same per-device batch (weak scaling), against JAX running
// the same step jitted over the same number of devices with the same shardings
// (bench/train_step_jax.py with "mesh"). Per layout:
//   step      median seconds per optimizer step, both sides, and titan over JAX
//   traffic   what each device sends per step for the collectives XLA's partitioner inserted
//             (counted from the compiled program, graph/collectives.h), and that over what the
//             layout needs on paper (train/graph_mode/graph_sharding.h planned_traffic)
//   state     the parameters and AdamW moments each device holds (FSDP divides them)
//   ops       the collectives per step in each side's compiled program, counted alike
// On 2 cores, 4 devices take turns on them: the step times measure the traffic's and the split
// programs' cost, not a speed-up; the traffic and state columns are what the layouts are about.
// Both sides run XLA's lowerings (titan's custom calls cannot be split by the partitioner). The
// ", SP" layouts add sequence parallelism: both sides keep the residual stream split along the
// sequence over tp; titan also holds Megatron's layout at the regions' edges (parallel::TpLayout).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/torch_reference.h"
#include "titan/core/parallel.h"
#include "titan/graph/collectives.h"
#include "titan/core/rng.h"
#include "titan/models/llama3/model.h"
#include "titan/models/llama3/parallelize.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/tp_layout.h"
#include "titan/train/graph_mode/graph_step.h"

namespace {

using nlohmann::json;
using titan::Tensor;
namespace bench = titan::bench;
namespace llama3 = titan::models::llama3;

constexpr int64_t kDim = 256, kLayers = 6, kHeads = 16, kFfn = 768, kVocab = 2048, kSeq = 256, kBatchPerDevice = 2;
constexpr int kWarmup = 1, kSteps = 4;
constexpr double kLr = 8e-4, kMiB = 1024.0 * 1024.0;

struct Layout {
  std::string name;
  int64_t dp_shard, tp;
  bool sequence_parallel = false;  // with tp > 1
  int64_t devices() const { return dp_shard * tp; }
  int64_t batch() const { return kBatchPerDevice * dp_shard; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// "all-gather 130, all-reduce 9" per step, loop trips included; "none".
std::string describe(const titan::graph::CollectiveCount& c) {
  std::string out;
  for (const titan::graph::CollectiveTally& k : c.kinds)
    out += (out.empty() ? "" : ", ") + k.kind + " " + std::to_string(k.count);
  return out.empty() ? "none" : out;
}

struct Titan {
  double step_seconds = 0, traffic_bytes = 0, planned_bytes = 0, state_bytes = 0, compile_seconds = 0;
  std::string collectives;
  double first_loss = 0;
};

Titan run_titan(const Layout& layout) {
  llama3::ModelArgs args;
  args.dim = kDim;
  args.n_layers = kLayers;
  args.n_heads = args.n_kv_heads = kHeads;
  args.ffn_dim = kFfn;
  args.vocab_size = kVocab;
  args.max_seq_len = kSeq;
  auto model = std::make_shared<llama3::Transformer>(args);
  titan::Generator gen(0);
  model->init_weights(gen);
  auto named = model->named_parameters();
  titan::optim::AdamW optimizer(named, {.lr = kLr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  titan::parallel::TpLayout tp(layout.tp, {.sequence_parallel = layout.sequence_parallel});
  if (layout.tp > 1) llama3::apply_tp(*model, tp);
  titan::train::GraphStep step(
      *model, optimizer, named,
      titan::train::GraphStepOptions{
          .runtime = {.plugin = "cpu", .client_options = {{"cpu_device_count", layout.devices()}}},
          .custom_kernels = false,
          .mesh = titan::train::GraphMesh({.dp_shard = layout.dp_shard, .tp = layout.tp}),
          .tp_splits = tp.splits(),
          .sequence_parallel = layout.sequence_parallel,
          .model_dim = kDim},
      std::cerr);
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  std::vector<int64_t> inputs, labels;
  for (int64_t i = 0; i < layout.batch() * kSeq; ++i) inputs.push_back(token(rng)), labels.push_back(token(rng));
  const titan::data::Batch batch{Tensor::from_vector(inputs, {layout.batch(), kSeq}),
                                 Tensor::from_vector(labels, {layout.batch(), kSeq})};
  Titan out;
  std::vector<double> seconds;
  for (int i = 0; i < kWarmup + kSteps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = step.run({batch}).loss;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) out.first_loss = loss;
    if (i >= kWarmup) seconds.push_back(dt);
    std::cerr << "titan " << layout.name << " step " << i + 1 << ": " << bench::fixed(dt * 1e3, 0) << " ms, loss "
              << bench::fixed(loss, 4) << "\n";
  }
  out.step_seconds = median(seconds);
  out.compile_seconds = step.last_compile_seconds();
  out.traffic_bytes = step.collectives().traffic_bytes();
  out.planned_bytes = step.planned_traffic().total();
  out.state_bytes = static_cast<double>(step.state_bytes(0));
  out.collectives = describe(step.collectives());
  return out;
}

json run_jax(const Layout& layout, int threads, const std::string& hlo_path) {
  return bench::run_python_script(
      bench::jax_python_path(), "train_step_jax.py",
      {{"threads", threads},
       {"device", "cpu"},
       {"warmup", kWarmup},
       {"steps", kSteps},
       {"seed", 0},
       {"variant", "f32"},
       {"mesh", {{"dp_shard", layout.dp_shard}, {"tp", layout.tp}, {"sequence_parallel", layout.sequence_parallel}}},
       {"hlo_path", hlo_path},
       {"config",
        {{"dim", kDim},
         {"n_layers", kLayers},
         {"n_heads", kHeads},
         {"n_kv_heads", kHeads},
         {"ffn_dim", kFfn},
         {"vocab_size", kVocab},
         {"seq", kSeq},
         {"batch", layout.batch()}}}});
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  bench::mark_start();
  const int threads = titan::num_threads();
  const std::vector<Layout> layouts = {
      {"one device", 1, 1}, {"FSDP 2", 2, 1},           {"FSDP 4", 4, 1},
      {"TP 2", 1, 2},       {"TP 2, SP", 1, 2, true},  {"TP 2 x FSDP 2", 2, 2},
      {"TP 2 x FSDP 2, SP", 2, 2, true}};
  std::vector<std::vector<std::string>> rows;
  std::string jax_about = "JAX: no round ran";
  std::vector<std::string> notes;
  for (const Layout& layout : layouts) {
    const Titan t = run_titan(layout);
    const std::string hlo_path = "/tmp/titan_bench_graph_parallel_" + std::to_string(::getpid()) + ".hlo";
    const json j = run_jax(layout, threads, hlo_path);
    std::string jax_step = "-", ratio = "-", jax_ops = "-", jax_traffic = "-";
    if (j.contains("error")) {
      notes.push_back("JAX " + layout.name + ": " + j["error"].get<std::string>());
    } else {
      const double js = median(j["step_seconds"].get<std::vector<double>>());
      jax_step = bench::fixed(js, 3);
      ratio = bench::fixed(js / t.step_seconds, 2) + "x";
      // JAX's compiled step counted as titan's is.
      std::ifstream in(hlo_path);
      std::ostringstream text;
      text << in.rdbuf();
      const titan::graph::CollectiveCount c = titan::graph::count_collectives(text.str(), layout.devices());
      jax_ops = describe(c);
      jax_traffic = bench::fixed(c.traffic_bytes() / kMiB, 1);
      std::remove(hlo_path.c_str());
      jax_about = "JAX " + j.value("jax_version", std::string("?")) + " (bench/train_step_jax.py, jax.jit over " +
                  "XLA_FLAGS' host devices, NamedSharding as titan's)";
    }
    rows.push_back({layout.name, std::to_string(layout.devices()), std::to_string(layout.batch()),
                    bench::fixed(t.step_seconds, 3), jax_step, ratio, bench::fixed(t.traffic_bytes / kMiB, 1), jax_traffic,
                    t.planned_bytes > 0 ? bench::fixed(t.traffic_bytes / t.planned_bytes, 2) + "x" : "-",
                    bench::fixed(t.state_bytes / kMiB, 1), t.collectives, jax_ops,
                    bench::fixed(t.compile_seconds, 1)});
  }
  std::cout << "\ntitan graph mode over CPU devices vs JAX, Llama 3 debug (dim " << kDim << ", " << kLayers
            << " layers, vocab " << kVocab << "), seq " << kSeq << ", " << kBatchPerDevice
            << " sequences per data-parallel device, f32, median of " << kSteps << " steps\n"
            << bench::machine_summary() << "\n"
            << jax_about << "\n\n"
            << "| layout | devices | batch | titan step s | JAX step s | titan/JAX speed | titan traffic MiB/device | "
               "JAX traffic MiB/device | titan traffic/planned | state MiB/device | titan collectives/step | "
               "JAX collectives/step | titan compile s |\n"
            << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    std::cout << "|";
    for (const std::string& cell : r) std::cout << " " << cell << " |";
    std::cout << "\n";
  }
  std::cout << "\nSpeed is JAX's step time over titan's (above 1: titan faster). Traffic: per device per step, "
               "by ring formulas over the collectives counted in each side's compiled program (loops per trip); planned: FSDP's "
               "gathers and reduce-scatter, HSDP's all-reduce and TP's activation all-reduces (or, with SP, their "
               "all-gathers and reduce-scatters, the same bytes) on paper. On "
               "2 cores the devices share the cores: times show cost, not speed-up.\n";
  for (const std::string& n : notes) std::cout << "note: " << n << "\n";
  return 0;
}
