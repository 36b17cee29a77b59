// FSDP's training step against one rank training the same per-rank batch: the llama3 debug
// model (6 blocks, dim 256, vocab 2048), seq 256, 2 sequences per rank, one OpenMP thread per
// rank. Run without mpirun it starts itself under mpirun with 2 and then 4 ranks; under mpirun it
// measures, on the ranks it was given:
//   step      mean seconds per optimizer step (one rank: rank 0 alone, the others waiting)
//   comm      seconds per step blocked in collectives, all-gathers and gradient reduction apart,
//             with FSDP's overlap (next block's all-gather prefetched, each block's
//             reduce-scatter started once its gradients are complete) and without
//   hidden    the share of that time the overlap hides (1 - with / without)
//   peak      the allocator's high-water mark per rank during the steps, and the resident set's
//             growth over the process before the model was built (PyTorch's figure)
// With more ranks than cores (4 ranks on 2 here), ranks take turns on the cores, so step times
// measure overlap and memory, not speed-up.
// After each titan run, PyTorch 2's FSDP2 (torch.distributed.fsdp.fully_shard over gloo,
// bench/fsdp_torch.py) trains the same model, sizes and ranks, eager and with each block under
// torch.compile, and the step times and resident growth are printed side by side.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/mpi_launch.h"
#include "support/torch_reference.h"
#include "titan/core/allocator.h"
#include "titan/core/process_malloc.h"
#include "titan/core/parallel.h"
#include "titan/data/loader.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/optim/adamw.h"
#include "titan/train/step/eager_step.h"

namespace {

using namespace titan;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSeq = 256, kBatchPerRank = 2, kSteps = 4;

struct Figures {
  double step_seconds = 0;
  double gather_wait_seconds = 0;  // per step
  double reduce_seconds = 0;       // per step
  double peak_bytes = 0;
  double rss_growth = 0;
};

// kSteps timed steps after one warm-up, on `world` (one rank: plain training; more: FSDP over
// all of them).
Figures measure(dist::ProcessGroup world, bool overlap) {
  // What an earlier measurement left cached is handed back, so that this one's growth is its own.
  CpuAllocator::instance().empty_cache();
  titan::release_free_memory();
  const int64_t rss_baseline = bench::status_bytes("VmRSS");
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  models::ModelConfig cfg;
  cfg.flavor = "debugmodel";
  Generator gen(1);
  std::shared_ptr<models::CausalLM> model = spec.build(cfg, kSeq, gen);
  dist::DeviceMesh mesh(world, {.dp_shard = -1});
  std::unique_ptr<parallel::FullyShard> fsdp =
      spec.parallelize(*model, {.mesh = &mesh, .fsdp = {.overlap = overlap}}).fsdp;
  auto named = fsdp ? fsdp->named_shards() : model->named_parameters();
  std::vector<Tensor> params;
  for (auto& [n, p] : named) params.push_back(p);
  optim::AdamW optimizer(named);
  Generator data(2 + world.rank());
  auto next = [&] {
    Tensor tokens = Tensor::rand({kBatchPerRank, kSeq + 1}, data, {}, 0, model->vocab_size()).to(kI64);
    return data::Batch{tokens.narrow(1, 0, kSeq).contiguous(), tokens.narrow(1, 1, kSeq).contiguous()};
  };
  train::StepParallelism sync;
  if (fsdp)
    sync = {.reduce = [&] { fsdp->reduce_gradients(); },
            .sum_norm_partials = [&](double partial) { return fsdp->sum_over_shards(partial); }};
  train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  const parallel::FullyShardStats before = fsdp ? fsdp->stats() : parallel::FullyShardStats{};
  CpuAllocator::instance().reset_peak();
  bench::reset_peak_rss();
  world.barrier().wait();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < kSteps; ++i) train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  world.barrier().wait();
  Figures f;
  f.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  if (fsdp) {
    f.gather_wait_seconds = (fsdp->stats().gather_wait_seconds - before.gather_wait_seconds) / kSteps;
    f.reduce_seconds = (fsdp->stats().reduce_seconds - before.reduce_seconds) / kSteps;
  }
  f.peak_bytes = static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes);
  f.rss_growth = static_cast<double>(bench::status_bytes("VmHWM") - rss_baseline);
  return f;
}

int run_ranks(dist::ProcessGroup& world) {
  const int n = world.size();
  Figures one;
  if (world.rank() == 0) one = measure(dist::ProcessGroup::single(), false);
  world.barrier().wait();
  const Figures with = measure(world, true);
  const Figures without = measure(world, false);
  // The slowest rank sets the pace; memory is the largest rank's.
  auto worst = [&](double v) { return world.all_reduce(v, dist::ReduceOp::max); };
  const double step = worst(with.step_seconds), gather = worst(with.gather_wait_seconds),
               gather_blocking = worst(without.gather_wait_seconds), reduce = worst(with.reduce_seconds),
               reduce_blocking = worst(without.reduce_seconds), peak = worst(with.peak_bytes),
               step_blocking = worst(without.step_seconds), rss = worst(with.rss_growth);
  if (world.rank() != 0) return 0;
  const double mib = 1.0 / (1 << 20);
  std::printf("FSDP, %d ranks (llama3 debugmodel, seq %lld, %lld sequences per rank, %d thread per rank)\n",
              n, static_cast<long long>(kSeq), static_cast<long long>(kBatchPerRank), num_threads());
  std::printf("  %-34s %12s %12s %8s\n", "", "titan FSDP", "one rank", "ratio");
  std::printf("  %-34s %12.3f %12.3f %8.2f\n", "step time (s)", step, one.step_seconds,
              step / one.step_seconds);
  std::printf("  %-34s %12.1f %12.1f %8.2f\n", "peak memory per rank (MiB)", peak * mib, one.peak_bytes * mib,
              peak / one.peak_bytes);
  auto hidden = [](double with, double without) { return without > 0 ? 100 * (1 - with / without) : 0.0; };
  std::printf("  %-34s %12s %12s %8s\n", "blocked in collectives (s/step)", "overlap", "no overlap",
              "hidden");
  std::printf("  %-34s %12.3f %12.3f %7.0f%%\n", "all-gathers", gather, gather_blocking,
              hidden(gather, gather_blocking));
  std::printf("  %-34s %12.3f %12.3f %7.0f%%\n", "gradient reduction", reduce, reduce_blocking,
              hidden(reduce, reduce_blocking));
  std::printf("  %-34s %12.3f %12.3f\n", "step time (s)", step, step_blocking);
  std::printf("  exposed communication: %.0f%% of the step with overlap\n", 100 * (gather + reduce) / step);
  // For the parent, which sets these beside PyTorch's.
  std::printf("%s\n", nlohmann::json{{"step_seconds", step},
                                     {"one_rank_step_seconds", one.step_seconds},
                                     {"rss_growth", rss},
                                     {"one_rank_rss_growth", one.rss_growth}}
                          .dump()
                          .c_str());
  return 0;
}

// Runs `command`, echoing what it prints, and returns the last line of it that is a JSON object,
// or {"error"}.
nlohmann::json run_echoing(const std::string& command) {
  nlohmann::json last = {{"error", "no figures from " + command}};
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, pipe)) {
      if (buf[0] == '{') {
        auto j = nlohmann::json::parse(buf, nullptr, /*allow_exceptions=*/false);
        if (j.is_object()) {
          last = std::move(j);
          continue;
        }
      }
      std::cout << buf << std::flush;
    }
    if (pclose(pipe) != 0) last = {{"error", "exit status of " + command}};
  }
  return last;
}

// titan's figures beside FSDP2's, eager and compiled (`torch`: reply by variant).
void print_comparison(int ranks, const nlohmann::json& titan,
                      const std::vector<std::pair<std::string, nlohmann::json>>& torch) {
  std::printf("titan FSDP vs PyTorch 2 FSDP2 (fully_shard per block and root, gloo), %d ranks:\n", ranks);
  if (titan.contains("error")) {
    std::printf("  no comparison: titan %s\n", titan["error"].get<std::string>().c_str());
    return;
  }
  const double mib = 1.0 / (1 << 20);
  struct Line {
    const char* label;
    const char* key;
    double scale;
    int decimals;
  };
  const Line lines[] = {{"step time (s)", "step_seconds", 1.0, 3},
                        {"one rank, unsharded (s)", "one_rank_step_seconds", 1.0, 3},
                        {"RSS growth per rank (MiB)", "rss_growth", mib, 1},
                        {"one rank RSS growth (MiB)", "one_rank_rss_growth", mib, 1}};
  std::printf("  %-28s %10s", "", "titan");
  for (const auto& [variant, reply] : torch) std::printf(" %14s", ("torch " + variant).c_str());
  std::printf(" %22s\n", "titan/best torch");
  for (const Line& l : lines) {
    const double mine = titan[l.key].get<double>() * l.scale;
    std::printf("  %-28s %10.*f", l.label, l.decimals, mine);
    std::optional<std::pair<std::string, double>> best;  // lowest: times and memory alike
    for (const auto& [variant, reply] : torch) {
      if (!reply.contains(l.key)) {
        std::printf(" %14s", "n/a");
        continue;
      }
      const double v = reply[l.key].get<double>() * l.scale;
      std::printf(" %14.*f", l.decimals, v);
      if (!best || v < best->second) best = {variant, v};
    }
    if (best)
      std::printf(" %22s\n", (bench::fixed(mine / best->second, 2) + "x (" + best->first + ")").c_str());
    else
      std::printf(" %22s\n", "n/a");
  }
  std::printf("  (below 1: titan is faster or smaller; titan's allocator peak per rank is printed above)\n");
  for (const auto& [variant, reply] : torch) {
    if (reply.contains("error"))
      std::printf("  torch %s failed: %s\n", variant.c_str(), reply["error"].get<std::string>().c_str());
    else if (reply.contains("first_step_seconds"))
      std::printf("  torch %s: first step %.1f s (the slowest rank; under compile, the compilation)\n",
                  variant.c_str(), reply["first_step_seconds"].get<double>());
  }
  for (const auto& [variant, reply] : torch)
    if (!reply.contains("error")) {
      std::printf("  %s\n", bench::describe_torch(reply).c_str());
      break;
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> status = bench::run_if_launched("bench_fsdp", run_ranks)) return *status;
  // Not under mpirun: run this binary under it, with one thread per rank; the ranks inherit the
  // BLAS kernels chosen here.
  bench::use_this_cpus_blas_kernels(argv);
  std::cout << bench::machine_summary() << "\n";
  int status = 0;
  for (int ranks : {2, 4}) {
    const std::string cmd = bench::mpirun_self(argv[0], ranks);
    std::cout << "$ " << cmd << std::endl;
    const nlohmann::json titan = run_echoing(cmd);
    std::vector<std::pair<std::string, nlohmann::json>> torch;
    for (const std::string& variant : bench::kTorchF32)
      torch.emplace_back(variant, bench::run_torch_script("fsdp_torch.py", {{"ranks", ranks},
                                                                            {"threads", 1},
                                                                            {"variant", variant},
                                                                            {"seq", kSeq},
                                                                            {"batch_per_rank", kBatchPerRank},
                                                                            {"warmup", 1},
                                                                            {"steps", kSteps}}));
    if (titan.contains("error")) status = 1;
    print_comparison(ranks, titan, torch);
  }
  return status;
}
