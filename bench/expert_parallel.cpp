// Expert parallelism's training step on the Qwen 3 MoE debug model (8 experts, 2 per token), seq
// 256, 2 sequences per rank, one OpenMP thread per rank, against one rank training its 2
// sequences with every expert. Run without mpirun it starts itself under mpirun with 2 and then 4
// ranks; under mpirun it measures EP over all of them (each rank its own batch, as data
// parallelism's ranks):
//   bytes     sent per rank per step by the token all-to-alls (parallel/comm_ops.h counts the
//             rows each rank sends to the others), beside what uniform routing needs: per MoE
//             layer the tokens' top_k rows of dim floats, (ep - 1) / ep of them to other ranks,
//             in dispatch and combine, forward and backward. The routing of these steps is not
//             exactly uniform, so the ratio sits near 1, not at it. The count exchange (a few
//             integers per expert) is counted too.
//   a2a time  seconds from the start of each all-to-all to its completion, summed per step.
//   hidden    each dispatch waits for its all-to-all at once: none of it is hidden under
//             computation, and the figure printed is the share of the step it takes.
//   other     ep borrows dp_shard's ranks (TorchTitan's layout), so everything outside the
//             experts is FSDP-sharded over them: its all-gathers and reduce-scatters, counted apart.
// With more ranks than cores, step times measure communication and memory, not speed-up.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "support/mpi_launch.h"
#include "support/torch_reference.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/data/loader.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/nn/moe/moe.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/comm_ops.h"
#include "titan/parallel/expert_parallel.h"
#include "titan/parallel/fully_shard.h"
#include "titan/train/step/eager_step.h"

namespace {

using namespace titan;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSeq = 256, kBatch = 2, kSteps = 3;

struct Figures {
  double step_seconds = 0;
  double a2a_bytes = 0;    // per step
  double a2a_seconds = 0;  // per step
  double other_bytes = 0;  // per step: FSDP's all-gathers and reduce-scatters over dp_shard
  double other_seconds = 0;
  double peak_bytes = 0;
  double analytical_a2a_bytes = 0;  // per step, uniform routing
};

// kSteps timed steps after one warm-up: one rank alone, or EP over all of `world`.
Figures measure(dist::ProcessGroup world) {
  CpuAllocator::instance().empty_cache();
  const models::TrainSpec& spec = models::get_train_spec("qwen3_moe");
  models::ModelConfig cfg;
  cfg.name = "qwen3_moe";
  cfg.flavor = "debugmodel";
  cfg.moe.load_balance_bias = false;
  Generator gen(1);
  std::shared_ptr<models::CausalLM> model = spec.build(cfg, kSeq, gen);
  const int64_t n = world.size();
  dist::DeviceMesh mesh(world, {.dp_shard = -1, .ep = n});
  models::Parallelized parts = spec.parallelize(*model, {.mesh = &mesh, .seq_len = kSeq});
  int64_t moe_layers = 0, dim = 0, top_k = 0;
  for (const auto& [name, m] : model->named_modules())
    if (auto* moe = dynamic_cast<nn::moe::MoE*>(m)) {
      ++moe_layers;
      dim = moe->router->gate->in_features();
      top_k = moe->router->top_k();
    }
  auto named = parts.fsdp ? parts.fsdp->named_shards() : model->named_parameters();
  std::vector<Tensor> params;
  for (auto& [name, p] : named) params.push_back(p);
  optim::AdamW optimizer(named);
  Generator data(2 + static_cast<uint64_t>(world.rank()));  // each rank its own batch
  auto next = [&] {
    Tensor tokens = Tensor::rand({kBatch, kSeq + 1}, data, {}, 0, model->vocab_size()).to(kI64);
    return data::Batch{tokens.narrow(1, 0, kSeq).contiguous(), tokens.narrow(1, 1, kSeq).contiguous()};
  };
  train::StepParallelism sync;
  if (parallel::FullyShard* fsdp = parts.fsdp.get())
    sync = {.before_backward = [fsdp](bool last) { fsdp->set_gradient_sync(last); },
            .reduce =
                [&, fsdp] {
                  fsdp->reduce_gradients();
                  if (parts.ep) parts.ep->scale_expert_gradients(named);
                },
            .sum_norm_partials = [fsdp](double partial) { return fsdp->sum_over_shards(partial); }};
  train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  CpuAllocator::instance().reset_peak();
  parallel::reset_comm_stats();
  world.barrier().wait();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < kSteps; ++i) train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  world.barrier().wait();
  Figures f;
  f.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  const parallel::CommStats& stats = parallel::comm_stats();
  f.a2a_bytes = stats.all_to_all_bytes / kSteps;
  f.a2a_seconds = stats.all_to_all_seconds / kSteps;
  f.other_bytes = (stats.bytes_sent - stats.all_to_all_bytes) / kSteps;
  f.other_seconds = (stats.wait_seconds - stats.all_to_all_seconds) / kSteps;
  f.peak_bytes = static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes);
  const double rows = static_cast<double>(kBatch * kSeq * top_k);
  f.analytical_a2a_bytes = static_cast<double>(moe_layers) * rows * static_cast<double>(dim) * 4.0 *
                           (static_cast<double>(n) - 1) / static_cast<double>(n) * 2 * 2;
  return f;
}

int run_ranks(dist::ProcessGroup& world) {
  const int n = world.size();
  Figures one;
  if (world.rank() == 0) one = measure(dist::ProcessGroup::single());
  world.barrier().wait();
  const double mib = 1.0 / (1 << 20);
  const Figures f = measure(world);
  auto worst = [&](double v) { return world.all_reduce(v, dist::ReduceOp::max); };
  auto mean = [&](double v) { return world.all_reduce(v, dist::ReduceOp::avg); };
  const double step = worst(f.step_seconds), peak = worst(f.peak_bytes), a2a_seconds = worst(f.a2a_seconds),
               a2a_bytes = mean(f.a2a_bytes), other_bytes = worst(f.other_bytes),
               other_seconds = worst(f.other_seconds);
  if (world.rank() != 0) return 0;
  std::printf(
      "expert parallel over %d ranks (qwen3_moe debugmodel, seq %lld, batch %lld per rank, %d thread per "
      "rank)\n",
      n, static_cast<long long>(kSeq), static_cast<long long>(kBatch), num_threads());
  std::printf("  %-46s %12s %12s %8s\n", "", "titan", "reference", "ratio");
  std::printf("  %-46s %12.2f %12.2f %8.3f\n", "all-to-all bytes per rank per step (MiB), uniform",
              a2a_bytes * mib, f.analytical_a2a_bytes * mib, a2a_bytes / f.analytical_a2a_bytes);
  std::printf("  %-46s %12.1f %12.1f %8.2f\n", "peak memory per rank (MiB), vs 1 rank", peak * mib,
              one.peak_bytes * mib, peak / one.peak_bytes);
  std::printf("  %-46s %12.3f %12.3f %8.2f\n", "step time (s), vs 1 rank on its batch", step,
              one.step_seconds, step / one.step_seconds);
  std::printf(
      "  all-to-all: %.3f s per step, %.0f%% of the step; hidden under compute: 0%% (each dispatch waits at "
      "once)\n  FSDP over dp_shard (ep's ranks): %.2f MiB sent, %.3f s waited per step\n",
      a2a_seconds, 100 * a2a_seconds / step, other_bytes * mib, other_seconds);
  return 0;
}

}  // namespace

int main(int, char** argv) { return titan::bench::distributed_main("bench_expert_parallel", argv, run_ranks); }
