// Pipeline parallelism's schedules against one rank running the same micro-batches one after the
// other: the llama3 debug model deepened to 8 blocks (dim 256, vocab 2048), 8 micro-batches of one
// sequence of 256 tokens, one OpenMP thread per rank. Run without mpirun it starts itself under
// mpirun with 2 and then 4 ranks; under mpirun every schedule runs one step's forwards and
// backwards (the optimizer is the same on every layout and left out) over all of them:
//   step      seconds per step, against one rank's
//   bubble    each rank's share of the step not spent computing its stages (waiting for a
//             neighbour, sending), the mean over ranks, beside the schedule's simulated bubble with
//             equal forward, input- and weight-gradient times and the published formula
//   peak      the allocator's high-water mark per rank (largest over ranks) against one rank's, and
//             the most micro-batches' activations a rank holds under the schedule
//   sent      bytes of activations and gradients each rank sends per step
// With more ranks than cores a waiting rank still takes a core (MPI polls), so the step times
// measure the schedules' order and overlap, not the speed-up a rank per core would give.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/mpi_launch.h"
#include "support/torch_reference.h"
#include "titan/core/allocator.h"
#include "titan/core/parallel.h"
#include "titan/dist/device_mesh.h"
#include "titan/models/registry.h"
#include "titan/ops/arith.h"
#include "titan/ops/loss.h"
#include "titan/train/step/pipeline_step.h"

namespace {

using namespace titan;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSeq = 256, kMicroBatches = 8, kLayers = 8, kSteps = 2;
const std::vector<std::string> kSchedules = {"GPipe", "1F1B", "Interleaved1F1B", "ZBH1", "ZBVZeroBubble"};

struct Figures {
  double step_seconds = 0;
  double bubble = 0;
  double peak_bytes = 0;
  double bytes_sent = 0;
};

std::shared_ptr<models::CausalLM> build() {
  models::ModelConfig cfg;
  cfg.flavor = "debugmodel";
  cfg.n_layers = kLayers;
  Generator gen(1);
  return models::get_train_spec("llama3").build(cfg, kSeq, gen);
}

data::Batch batch(int64_t vocab) {
  Generator data(2);  // the same batch on every rank
  Tensor tokens = Tensor::rand({kMicroBatches, kSeq + 1}, data, {}, 0, static_cast<double>(vocab)).to(kI64);
  return {tokens.narrow(1, 0, kSeq).contiguous(), tokens.narrow(1, 1, kSeq).contiguous()};
}

// One rank: the micro-batches forward and backward one after the other.
Figures one_rank() {
  CpuAllocator::instance().empty_cache();
  std::shared_ptr<models::CausalLM> model = build();
  const data::Batch b = batch(model->vocab_size());
  auto step = [&] {
    for (int64_t m = 0; m < kMicroBatches; ++m) {
      Tensor loss = ops::cross_entropy((*model)(b.inputs.narrow(0, m, 1)), b.labels.narrow(0, m, 1));
      ops::scale(loss, 1.0 / kMicroBatches).backward();
    }
  };
  step();
  CpuAllocator::instance().reset_peak();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < kSteps; ++i) step();
  Figures f;
  f.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  f.peak_bytes = static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes);
  return f;
}

Figures pipelined(dist::ProcessGroup& world, const std::string& schedule, std::string& description) {
  CpuAllocator::instance().empty_cache();
  std::shared_ptr<models::CausalLM> model = build();
  const models::TrainSpec& spec = models::get_train_spec("llama3");
  dist::DeviceMesh mesh(world, {.pp = world.size(), .dp_shard = 1});
  models::Parallelized parts =
      spec.parallelize(*model, {.mesh = &mesh, .pipeline = {.schedule = schedule, .micro_batches = kMicroBatches}});
  parallel::PipelineExecutor executor(parts.pp->schedule(), parts.pp->group(), Shape{1, kSeq, model->hidden_size()});
  description = parallel::describe_schedule(parts.pp->schedule());
  const data::Batch b = batch(model->vocab_size());
  auto step = [&] { return train::run_pipeline_batch(*model, *parts.pp, executor, b, nullptr, 1.0 / kMicroBatches); };
  step();
  CpuAllocator::instance().reset_peak();
  world.barrier().wait();
  Figures f;
  double compute = 0, wall = 0;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < kSteps; ++i) {
    const parallel::PipelineStepStats s = step();
    compute += s.compute_seconds;
    wall += s.wall_seconds;
    f.bytes_sent += s.bytes_sent / kSteps;
  }
  world.barrier().wait();
  f.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  f.bubble = 1 - compute / wall;
  f.peak_bytes = static_cast<double>(CpuAllocator::instance().stats().peak_allocated_bytes);
  return f;
}

int run_ranks(dist::ProcessGroup& world) {
  const int n = world.size();
  Figures one;
  if (world.rank() == 0) one = one_rank();
  // The other ranks wait asleep: MPI's own wait polls, and would take the cores rank 0 times on.
  dist::Work measured = world.barrier();
  while (!measured.test()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double mib = 1.0 / (1 << 20);
  if (world.rank() == 0)
    std::printf("pipeline parallel over %d ranks (llama3 debugmodel, %lld blocks, %lld micro-batches of 1 x %lld "
                "tokens, %d thread per rank; forward and backward, no optimizer)\n",
                n, static_cast<long long>(kLayers), static_cast<long long>(kMicroBatches),
                static_cast<long long>(kSeq), num_threads());
  for (const std::string& schedule : kSchedules) {
    std::string description;
    const Figures f = pipelined(world, schedule, description);
    const double step = world.all_reduce(f.step_seconds, dist::ReduceOp::max),
                 bubble = world.all_reduce(f.bubble, dist::ReduceOp::avg),
                 peak = world.all_reduce(f.peak_bytes, dist::ReduceOp::max),
                 sent = world.all_reduce(f.bytes_sent, dist::ReduceOp::max);
    if (world.rank() != 0) continue;
    std::printf("%s\n  %s\n", schedule.c_str(), description.c_str());
    std::printf("  %-44s %12s %12s %8s\n", "", "titan", "reference", "ratio");
    std::printf("  %-44s %12.3f %12.3f %8.2f\n", "step time (s), vs 1 rank", step, one.step_seconds,
                step / one.step_seconds);
    std::printf("  %-44s %12.1f %12.1f %8.2f\n", "peak memory per rank (MiB), vs 1 rank", peak * mib,
                one.peak_bytes * mib, peak / one.peak_bytes);
    std::printf("  %-44s %12.3f\n", "measured bubble (mean over ranks)", bubble);
    std::printf("  %-44s %12.2f\n", "sent per rank per step (MiB)", sent * mib);
  }
  return 0;
}

}  // namespace

int main(int, char** argv) { return titan::bench::distributed_main("bench_pipeline", argv, run_ranks); }
