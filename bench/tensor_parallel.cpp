// Tensor and context parallelism's training step against one rank training the same batch: the
// llama3 debug model (6 blocks, dim 256, 16 heads of 16, vocab 2048), seq 256, 2 sequences, one
// OpenMP thread per rank. Run without mpirun it starts itself under mpirun with 2 and then 4 ranks;
// under mpirun it measures tensor parallelism over all of them (with and without sequence
// parallelism), then context parallelism over all of them:
//   bytes     sent per rank per step by the split-activation collectives, counted per call as a
//             ring algorithm moves them (parallel/comm_ops.h), beside the count Megatron's plan
//             should need: per block 4 collectives of the [batch, seq, dim] activations forward
//             and 4 backward (all-gather / reduce-scatter with sequence parallelism, all-reduce
//             without, which moves twice the bytes of each but half as many run), 4 more for the
//             embedding and the final norm, and a few floats per token for the loss. A wrong plan
//             shows up as a ratio away from 1.
//             Context parallelism's ring attention sends, per block, each rank's K and V on
//             cp - 1 hops forward and again in backward, and their gradient sums cp hops; its
//             parameters' gradients are then averaged over cp (an all-reduce of every gradient).
//   hidden    tensor parallelism's ops wait for their collectives at once, so none of it is
//             hidden: the figure printed is the share of the step spent waiting. Ring attention
//             sends the next block while it computes on this one: the figure is the time it
//             still waited against the time it computed.
//   peak      the allocator's high-water mark per rank against one rank's.
// The reference is the analytical count and one rank; PyTorch's DTensor tensor parallelism needs
// NCCL for its collectives' async paths and is not timed here. With more ranks than cores, step
// times measure overlap and memory, not speed-up.
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
#include "titan/optim/adamw.h"
#include "titan/parallel/comm_ops.h"
#include "titan/parallel/context_parallel.h"
#include "titan/train/step/eager_step.h"

namespace {

using namespace titan;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSeq = 256, kBatch = 2, kSteps = 3, kDim = 256, kLayers = 6, kHeads = 16;

enum class Mode { tensor_sequence, tensor, context };

struct Figures {
  double step_seconds = 0;
  double bytes_per_step = 0;
  double wait_seconds = 0;  // per step
  double peak_bytes = 0;
  double ring_bytes = 0;            // per step
  double ring_wait_seconds = 0;     // per step
  double ring_compute_seconds = 0;  // per step
  double params = 0;
};

// kSteps timed steps after one warm-up: one rank alone, or split over all of `world` by `mode`.
Figures measure(dist::ProcessGroup world, Mode mode) {
  CpuAllocator::instance().empty_cache();
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  models::ModelConfig cfg;
  cfg.flavor = "debugmodel";
  Generator gen(1);
  std::shared_ptr<models::CausalLM> model = spec.build(cfg, kSeq, gen);
  const int64_t n = world.size();
  const bool context = mode == Mode::context;
  dist::DeviceMesh mesh(world, {.dp_shard = 1, .cp = context ? n : 1, .tp = context ? 1 : n});
  models::Parallelized parts = spec.parallelize(
      *model, {.mesh = &mesh, .tp = {.sequence_parallel = mode == Mode::tensor_sequence}, .seq_len = kSeq});
  auto named = model->named_parameters();
  std::vector<Tensor> params;
  for (auto& [name, p] : named) params.push_back(p);
  optim::AdamW optimizer(named);
  Generator data(2);  // the same batch on every rank
  auto next = [&] {
    Tensor tokens = Tensor::rand({kBatch, kSeq + 1}, data, {}, 0, model->vocab_size()).to(kI64);
    data::Batch b{tokens.narrow(1, 0, kSeq).contiguous(), tokens.narrow(1, 1, kSeq).contiguous()};
    if (parts.cp) {
      parts.cp->begin_batch(kBatch, Tensor());
      b.inputs = parts.cp->shard(b.inputs);
      b.labels = parts.cp->shard(b.labels);
    }
    return b;
  };
  train::StepParallelism sync;
  if (parts.tp) {
    parallel::TensorParallel& tp = *parts.tp;
    sync = {.reduce = [&] { tp.reduce_partial_gradients(named); },
            .sum_norm_partials =
                [&](double partial) { return tp.group().all_reduce(partial, dist::ReduceOp::sum); },
            .norm_params = tp.norm_params(named),
            .loss = [&](const Tensor& logits, const Tensor& labels) { return tp.loss(logits, labels); }};
  }
  if (parts.cp) sync.reduce = [&] { parts.cp->average_gradients(params); };
  train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  CpuAllocator::instance().reset_peak();
  parallel::reset_comm_stats();
  parallel::reset_ring_attention_stats();
  world.barrier().wait();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < kSteps; ++i) train::train_step(*model, optimizer, params, 1.0, 1, next, sync);
  world.barrier().wait();
  Figures f;
  f.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  const parallel::RingAttentionStats& ring = parallel::ring_attention_stats();
  f.bytes_per_step = (parallel::comm_stats().bytes_sent + static_cast<double>(ring.bytes_sent)) / kSteps;
  f.wait_seconds = parallel::comm_stats().wait_seconds / kSteps;
  f.ring_bytes = static_cast<double>(ring.bytes_sent) / kSteps;
  f.ring_wait_seconds = ring.wait_seconds / kSteps;
  f.ring_compute_seconds = ring.compute_seconds / kSteps;
  f.peak_bytes = static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes);
  for (const Tensor& p : params) f.params += static_cast<double>(p.numel());
  return f;
}

// Bytes per rank per step that the plan needs (see the top of this file).
double analytical_bytes(int n, Mode mode, double params) {
  const double ring = (n - 1.0) / n;
  if (mode == Mode::context) {
    const double block = 4.0 * kBatch * (kSeq / n) * kHeads * (kDim / kHeads);  // one rank's K (or V)
    return kLayers * 2 * block * (3.0 * n - 2) + 2 * ring * 4.0 * params;
  }
  const double activation = 4.0 * kBatch * kSeq * kDim;
  const double blocks = (8.0 * kLayers + 4) * ring * activation;
  const double rows = kBatch * kSeq;
  const double loss = 2 * ring * 4.0 * 3 * rows;  // max, then sums and target logits, all-reduced
  // Sequence parallelism's norms see a part of the tokens each: their weights' gradients are summed.
  const double norms = mode == Mode::tensor_sequence ? 2 * ring * 4.0 * kDim * (2 * kLayers + 1) : 0;
  return blocks + loss + norms;
}

int run_ranks(dist::ProcessGroup& world) {
  const int n = world.size();
  Figures one;
  if (world.rank() == 0) one = measure(dist::ProcessGroup::single(), Mode::tensor);
  world.barrier().wait();
  const double mib = 1.0 / (1 << 20);
  for (Mode mode : {Mode::tensor_sequence, Mode::tensor, Mode::context}) {
    const Figures f = measure(world, mode);
    auto worst = [&](double v) { return world.all_reduce(v, dist::ReduceOp::max); };
    const double step = worst(f.step_seconds), peak = worst(f.peak_bytes), wait = worst(f.wait_seconds),
                 bytes = worst(f.bytes_per_step), ring_wait = worst(f.ring_wait_seconds),
                 ring_compute = worst(f.ring_compute_seconds);
    if (world.rank() != 0) continue;
    const double want = analytical_bytes(n, mode, f.params);
    const char* what = mode == Mode::context  ? "context parallel (ring attention)"
                       : mode == Mode::tensor ? "tensor parallel"
                                              : "tensor parallel, sequence parallel";
    std::printf("%s over %d ranks (llama3 debugmodel, seq %lld, batch %lld, %d thread per rank)\n", what, n,
                static_cast<long long>(kSeq), static_cast<long long>(kBatch), num_threads());
    std::printf("  %-40s %12s %12s %8s\n", "", "titan", "reference", "ratio");
    std::printf("  %-40s %12.2f %12.2f %8.3f\n", "bytes sent per rank per step (MiB), plan", bytes * mib,
                want * mib, bytes / want);
    std::printf("  %-40s %12.1f %12.1f %8.2f\n", "peak memory per rank (MiB), vs 1 rank", peak * mib,
                one.peak_bytes * mib, peak / one.peak_bytes);
    std::printf("  %-40s %12.3f %12.3f %8.2f\n", "step time (s), vs 1 rank", step, one.step_seconds,
                step / one.step_seconds);
    if (mode == Mode::context)
      std::printf(
          "  ring attention: %.3f s per step computing, %.3f s waiting for blocks (the rest of its "
          "traffic hidden under the computing); gradient all-reduce: %.3f s per step, not hidden\n",
          ring_compute, ring_wait, wait);
    else
      std::printf(
          "  waiting in collectives: %.3f s per step, %.0f%% of the step; hidden under compute: 0%% "
          "(each op waits at once)\n",
          wait, 100 * wait / step);
  }
  return 0;
}

}  // namespace

int main(int, char** argv) { return titan::bench::distributed_main("bench_tensor_parallel", argv, run_ranks); }
