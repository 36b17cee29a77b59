// A weak-scaling model on paper for graph mode's FSDP: Llama 3 8B and Qwen 3 235B-A22B from 8 to
// 1024 devices, each device keeping the same tokens per step, on TPU v5p (FSDP over the ICI torus)
// and H100 (FSDP over a node's NVLink, the nodes' gradient shards all-reduced over InfiniBand:
// HSDP), projecting step time and efficiency against 8 devices. It is an estimate, not a
// measurement: nothing here runs on those machines.
//
//   compute   tokens x the model's training FLOPs per token (ModelSummary: 6 N_active + attention)
//             / (peak x the assumed MFU)
//   traffic   FSDP's, as train/graph_mode/graph_sharding.h plans it: parameters gathered in bf16 for forward and
//             again for backward, gradients reduce-scattered in f32, (N-1)/N of the parameters each;
//             across H100 nodes the gradient shards' all-reduce, 2 (r-1)/r of them. Each term /
//             the link's achieved bandwidth, plus a latency per collective (3 per layer) growing
//             with log2 of the group.
//   step      compute + what of the traffic compute does not hide (collectives overlapped with
//             compute, as XLA's async collectives and FSDP's prefetch do); "no overlap": the sum.
// Calibration: graph mode's compiled FSDP 4 step of the debug model (CPU plugin) is counted with
// graph/collectives.h and its traffic over the plan printed: the plan is what the partitioner
// produces only as far as that ratio says.
// The reference: the published weak scaling of Qwen 3 235B on TPU from 8 to 1024 chips, 93%
// (quoted, not run), which also splits the experts (expert parallelism), as titan's graph mode
// does not yet.
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/torch_reference.h"
#include "titan/models/llama3/model.h"
#include "titan/models/registry.h"
#include "titan/optim/adamw.h"
#include "titan/train/graph_mode/graph_step.h"
#include "titan/train/config/job_config.h"

namespace {

using titan::Tensor;
namespace bench = titan::bench;

struct Hardware {
  std::string name;
  double peak_flops;        // bf16 dense, per device
  double fast_bandwidth;    // achieved bytes/s per device within the fast domain
  int64_t fast_domain;      // devices joined by it (a TPU pod slice: all; an H100 node: 8)
  double slow_bandwidth;    // achieved bytes/s per device between fast domains
  // A ring that stays within one node (node_size devices) runs at node_bandwidth, whatever the
  // plan across nodes.
  int64_t node_size;
  double node_bandwidth;
  double latency;           // seconds per log2 step of one collective
  double memory;            // bytes per device
  std::string source;
};

// Published peak figures; achieved bandwidths are assumptions (stated in the output).
const std::vector<Hardware> kHardware = {
    {"TPU v5p", 459e12, 0.5 * 600e9, 1 << 30, 0, 1 << 30, 0.5 * 600e9, 5e-6, 95e9,
     "459 TFLOP/s bf16, 95 GB HBM, ICI 4800 Gbps (600 GB/s) per chip, half achieved by a collective; FSDP over "
     "one torus"},
    {"H100 HSDP", 989e12, 0.8 * 450e9, 8, 0.8 * 50e9, 8, 0.8 * 450e9, 5e-6, 80e9,
     "989 TFLOP/s bf16 dense, 80 GB; FSDP over a node's 8 GPUs on NVLink (450 GB/s per direction, 80% "
     "achieved), the gradient shards all-reduced between nodes over InfiniBand NDR 400 Gb/s per GPU (50 GB/s, "
     "80% achieved)"},
    {"H100 FSDP", 989e12, 0.8 * 50e9, 1 << 30, 0, 8, 0.8 * 450e9, 5e-6, 80e9,
     "the same GPUs with FSDP over all of them: beyond a node every ring crosses InfiniBand, so its rate is "
     "InfiniBand's (for 8 GPUs, one node, NVLink's)"},
};
constexpr double kMfu = 0.5;

struct ModelCase {
  std::string name, config;
  double params = 0, flops_per_token = 0, tokens = 0;
  int64_t layers = 0;
};

struct Projection {
  double compute = 0, comm = 0;
  double state = 0;  // bytes per device: f32 parameters, gradients and AdamW's two moments, sharded
  bool fits = true;
  double step() const { return compute + std::max(0.0, comm - compute); }
  double no_overlap() const { return compute + comm; }
};

Projection project(const ModelCase& m, const Hardware& hw, int64_t n, double traffic_factor) {
  Projection p;
  p.compute = m.tokens * m.flops_per_token / (hw.peak_flops * kMfu);
  const int64_t shard = std::min(n, hw.fast_domain), replicas = n / shard;
  const double s = static_cast<double>(shard), r = static_cast<double>(replicas);
  const double fast = n <= hw.node_size ? hw.node_bandwidth : hw.fast_bandwidth;
  p.state = 16 * m.params / s;
  p.fits = p.state < hw.memory;
  const double fsdp_bytes = (s - 1) / s * m.params * (2 + 2 + 4);
  const double collectives = 3.0 * static_cast<double>(m.layers);
  p.comm = traffic_factor * fsdp_bytes / fast + collectives * hw.latency * std::log2(s);
  if (replicas > 1)
    p.comm += traffic_factor * 2 * (r - 1) / r * m.params / s * 4 / hw.slow_bandwidth +
              static_cast<double>(m.layers) * hw.latency * std::log2(r);
  return p;
}

// The debug model's FSDP 4 step compiled for the CPU plugin's 4 devices: its counted traffic over
// the plan.
double calibrate(std::string& about) {
  const titan::train::JobConfig c = titan::train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/llama3/debug.toml");
  const titan::models::TrainSpec& spec = titan::models::get_train_spec(c.model.name);
  titan::Generator gen(0);
  auto model = spec.build(c.model, 256, gen);
  auto named = model->named_parameters();
  titan::optim::AdamW optimizer(named, {});
  titan::train::GraphStep step(*model, optimizer, named,
                               {.runtime = {.plugin = "cpu", .client_options = {{"cpu_device_count", int64_t{4}}}},
                                .custom_kernels = false,
                                .mesh = titan::train::GraphMesh({.dp_shard = 4})},
                               std::cerr);
  std::vector<int64_t> ids(4 * 256);
  std::mt19937_64 rng(0);
  for (int64_t& t : ids) t = static_cast<int64_t>(rng() % 2048);
  const Tensor tokens = Tensor::from_vector(ids, {4, 256});
  step.run(std::vector<titan::data::Batch>{{tokens, tokens}});
  const double ratio = step.collectives().traffic_bytes() / step.planned_traffic().total();
  about = "graph mode's compiled FSDP 4 step of the Llama 3 debug model (seq 256) sends " +
          bench::fixed(step.collectives().traffic_bytes() / (1 << 20), 1) + " MiB per device against " +
          bench::fixed(step.planned_traffic().total() / (1 << 20), 1) + " MiB planned: " + bench::fixed(ratio, 2) + "x";
  return ratio;
}

}  // namespace

int main(int argc, char** argv) {
  bench::use_this_cpus_blas_kernels(argv);
  std::string calibration;
  const double factor = calibrate(calibration);
  std::vector<ModelCase> models;
  for (const auto& [name, config] : std::vector<std::pair<std::string, std::string>>{
           {"Llama 3 8B", "llama3/8b.toml"}, {"Qwen 3 235B-A22B", "qwen3/235b_a22b.toml"}}) {
    const titan::train::JobConfig c = titan::train::load_job_config(std::string(TITAN_SOURCE_DIR) + "/configs/" + config);
    const titan::models::ModelSummary s =
        titan::models::get_train_spec(c.model.name).summarize(c.model, c.training.seq_len);
    ModelCase m{.name = name, .config = config};
    m.params = static_cast<double>(s.num_params);
    m.flops_per_token = s.flops_per_token;
    m.tokens = static_cast<double>(c.training.local_batch_size * c.training.seq_len);
    m.layers = s.n_layers;
    models.push_back(m);
  }
  std::cout << "Weak scaling of graph mode's FSDP on paper (an estimate, not a measurement)\n"
            << "calibration: " << calibration << "; the projected traffic is the plan times that\n"
            << "assumptions: MFU " << kMfu << " of peak for compute; collectives overlap compute; latency 5 us "
            << "per log2 step of each collective, 3 collectives per layer\n";
  for (const Hardware& hw : kHardware) std::cout << "  " << hw.name << ": " << hw.source << "\n";
  std::cout << "state: f32 parameters, gradients and two moments (16 bytes a parameter) over the shards, "
               "activations left out; compute share: compute over the step (MFU is that times the assumed 0.5); efficiency "
               "is against the fewest devices that hold the state\n"
            << "\n| model | tokens/device | hardware | devices | state GB/device | compute s | comm s | step s | "
               "compute share | efficiency | efficiency, no overlap |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  const std::vector<int64_t> counts = {8, 64, 256, 1024};
  for (const ModelCase& m : models)
    for (const Hardware& hw : kHardware) {
      std::optional<Projection> base;
      for (int64_t n : counts) {
        const Projection p = project(m, hw, n, factor);
        if (p.fits && !base) base = p;
        std::cout << "| " << m.name << " | " << static_cast<int64_t>(m.tokens) << " | " << hw.name << " | " << n << " | "
                  << bench::fixed(p.state / 1e9, 1) << (p.fits ? "" : " (does not fit)") << " | "
                  << bench::fixed(p.compute, 2) << " | " << bench::fixed(p.comm, 2) << " | " << bench::fixed(p.step(), 2)
                  << " | " << bench::fixed(100 * p.compute / p.step(), 0) << "%"
                  << " | " << (p.fits ? bench::fixed(100 * base->step() / p.step(), 1) + "%" : std::string("-"))
                  << " | " << (p.fits ? bench::fixed(100 * base->no_overlap() / p.no_overlap(), 1) + "%" : std::string("-"))
                  << " |\n";
      }
    }
  std::cout << "\nreference (quoted, not run): Qwen 3 235B on TPU, 8 to 1024 chips, 93% weak-scaling efficiency "
               "with experts split over chips (expert parallelism), which graph mode does not do: FSDP alone "
               "gathers all 235B parameters per step, so its traffic, not its compute, sets the step.\n";
  return 0;
}
