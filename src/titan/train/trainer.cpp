#include "titan/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <streambuf>

#include "titan/core/allocator.h"
#include "titan/core/autocast.h"
#include "titan/core/memory_owner.h"
#include "titan/core/parallel.h"
#include "titan/dist/device_mesh.h"
#include "titan/kernels/cpu/blas_kernels.h"
#include "titan/kernels/cpu/onednn_matmul.h"
#include "titan/models/registry.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/parallel/data_parallel.h"
#include "titan/parallel/data_parallel_style.h"
#include "titan/parallel/deferred_init.h"
#include "titan/parallel/pipeline_parallel.h"
#include "titan/train/checkpoint_manager.h"
#include "titan/train/layout_checks.h"
#include "titan/train/memory_plan.h"
#include "titan/train/metrics/memory_snapshot.h"
#include "titan/train/metrics/metrics.h"
#include "titan/train/metrics/peak_flops.h"
#include "titan/train/metrics/step_profiler.h"
#include "titan/train/step/step_engine.h"
#include "titan/train/language_model_workload.h"
#include "titan/train/workload.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

// The standard output or error stream, attached to a terminal.
bool console_is_terminal(const std::ostream& log) {
  return (&log == &std::cout && isatty(STDOUT_FILENO)) || (&log == &std::cerr && isatty(STDERR_FILENO));
}

// Where ranks other than 0 send the log: nowhere.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

// The dtype the run's matrix products multiply in (training.mixed_precision_param).
DType matmul_dtype(const TrainingConfig& t) {
  return t.mixed_precision_param == "bfloat16" ? kBF16 : kF32;
}

}  // namespace

struct Trainer::State {
  State(JobConfig c, std::ostream& l, dist::ProcessGroup w)
      : cfg(std::move(c)),
        world(std::move(w)),
        null_log(&null_buffer),
        log(logs() ? l : null_log),
        rng(static_cast<uint64_t>(cfg.training.seed)) {}
  // Whether this process writes the log: world rank 0, or the one rank a dry run simulates.
  bool logs() const { return world.rank() == 0 || world.is_simulated(); }
  // Rank 0 writes warnings to the log with everything else; the other ranks, whose log goes
  // nowhere, to stderr with their rank.
  void warn(const std::string& text) const {
    if (logs())
      log << "titan: warning: " << text << "\n";
    else
      std::cerr << "titan: rank " << world.rank() << ": warning: " << text << "\n";
  }
  JobConfig cfg;
  dist::ProcessGroup world;
  NullBuffer null_buffer;
  std::ostream null_log;
  std::ostream& log;
  std::unique_ptr<ExecutionMode> mode;
  // The job's layout, resolved once over what the mode splits; `mesh` is this process's ranks.
  dist::ParallelDims dims;
  std::unique_ptr<dist::DeviceMesh> mesh;
  std::unique_ptr<MemorySnapshots> memory_snapshots;
  std::unique_ptr<parallel::DataParallel> data_parallel;
  Generator rng;
  std::unique_ptr<Workload> workload;
  std::shared_ptr<nn::Module> model;
  // After the model, whose modules hold their hooks: destroyed first, FSDP (which shards what
  // tensor parallelism split) before tensor parallelism.
  models::Parallelized plans;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::LrScheduler> scheduler;
  std::unique_ptr<MetricsLogger> metrics;
  std::vector<Tensor> params;
  std::vector<std::pair<std::string, Tensor>> named_params;  // params by parameter name
  BatchPlan plan;
  PeakFlops peak;
  bool warned_peak = false;
  // Holds references to the members above, so it is declared, and destroyed, after them.
  std::unique_ptr<CheckpointManager> checkpointer;
  std::unique_ptr<StepProfiler> profiler;
  // Made last, from everything above (the graph engine's hooks on the model go first).
  std::unique_ptr<StepEngine> engine;
  int64_t start_step = 0;
  parallel::DataParallelStyle dp_style = parallel::DataParallelStyle::none;

  // The constructor's steps, in order; each builds what its name says from cfg.
  // The layout of `degrees` as the mode lays it out over `world`: dims, mesh and the batch plan.
  void lay_out(const dist::MeshDegrees& degrees);
  WorkloadContext context() { return {.cfg = cfg, .mesh = *mesh, .dims = dims, .plan = plan,
                                       .devices_fed = devices_fed(), .mode = *mode, .log = log}; }
  // The model on meta, its parallel plans applied: shapes only, nothing proportional to it.
  void build_model();
  // This rank's memory plan of the model as built: logged, and checked against the memory the
  // process may use (training.memory_check).
  MemoryPlan plan_memory(const std::string& scope);
  // Deferred initialisation: this rank's shards and slices allocated and given their values.
  void initialise();
  // What the optimizer steps: FSDP's shards, else the parameters.
  std::vector<std::pair<std::string, Tensor>> optimized_params() const {
    return plans.fsdp ? plans.fsdp->named_shards() : model->named_parameters();
  }
  void build_optimizer();
  void build_metrics();
  void log_setup();
  // The layout's data-parallel ranks or devices this process feeds: 1 in eager mode, every one in
  // graph mode, where one process loads the rows of all its devices.
  int64_t devices_fed() const {
    return dims.degree(dist::MeshAxis::dp) / mesh->degree(dist::MeshAxis::dp);
  }
  // The plans that split parameters (tensor, expert parallelism), for initialisation and
  // checkpoints.
  std::vector<const parallel::ParameterSlices*> slice_plans() const;
  EngineParts engine_parts() {
    return {.cfg = cfg,
            .optimizer = *optimizer,
            .named_params = named_params,
            .plans = plans,
            .ddp = data_parallel.get(),
            .mesh = *mesh,
            .world = world,
            .log = log,
            .start_step = start_step};
  }
};

void Trainer::State::lay_out(const dist::MeshDegrees& degrees) {
  world.set_timeout_seconds(cfg.comm.timeout_seconds);
  ExecutionMode::Layout layout = mode->lay_out(degrees, world, cfg);
  dims = layout.dims;
  mesh = std::move(layout.mesh);
  dp_style = parallel::data_parallel_style(*mesh);
  // Every data-parallel rank or device of the layout takes its own rows of the global batch.
  plan = plan_batches(cfg.training, dims.degree(dist::MeshAxis::dp));
  // Before anything is built or read: the family refuses by key what it does not run here.
  workload->check_layout(cfg, dims);
}

void Trainer::State::build_model() {
  const JobConfig& c = cfg;
  memory_snapshots = std::make_unique<MemorySnapshots>(c, world.rank(), log);
  model = workload->build_model(context(), rng, plans);
}

void Trainer::State::initialise() {
  {
    MemoryOwnerScope owner(MemoryCategory::parameters);
    // A plan's slice first; a parameter outside this rank's pipeline stages is the empty box of it.
    parallel::SliceOf slice_of = [this, slices = slice_plans()](const std::string& name,
                                                                const Tensor&) -> std::optional<parallel::GlobalSlice> {
      for (const parallel::ParameterSlices* plan : slices)
        if (std::optional<parallel::GlobalSlice> slice = plan->slice_of(name)) return slice;
      return plans.pp ? plans.pp->slice_of(name) : std::nullopt;
    };
    parallel::deferred_init(*model, rng, plans.fsdp.get(), slice_of);
  }
  workload->after_initialise(*mesh);
}

std::vector<const parallel::ParameterSlices*> Trainer::State::slice_plans() const {
  std::vector<const parallel::ParameterSlices*> slices;
  if (plans.tp) slices.push_back(plans.tp.get());
  if (plans.ep) slices.push_back(plans.ep.get());
  return slices;
}

MemoryPlan Trainer::State::plan_memory(const std::string& scope) {
  const JobConfig& c = cfg;
  const std::vector<std::pair<std::string, Tensor>> optimized = optimized_params();
  const MemoryPlan memory =
      train::plan_memory({.model = *model,
                          .fsdp = plans.fsdp.get(),
                          .ddp = dp_style == parallel::DataParallelStyle::ddp,
                          .pp = plans.pp.get(),
                          .pp_rank = mesh->coordinate(dist::MeshAxis::pp),
                          .optimized = optimized,
                          .sequences_per_forward = plans.pp ? c.parallelism.pipeline_parallel_microbatch_size
                                                            : c.training.local_batch_size,
                          .tokens_per_sequence = c.training.seq_len / dims.degree(dist::MeshAxis::cp),
                          .micro_batches = plan.gradient_accumulation_steps,
                          .checkpointing = c.activation_checkpoint,
                          .matmul_dtype = matmul_dtype(c.training),
                          .reshard_after_forward = c.parallelism.fsdp_reshard_after_forward != "never",
                          .scope = scope,
                          .blocks = workload->blocks(),
                          .activation_bytes = workload->activation_bytes(c),
                          .frozen = workload->frozen_bytes(c, *mesh)});
  log_memory_plan(memory, log);
  check_memory_plan(memory, available_memory(), c.training.memory_check, log,
                    [this](const std::string& text) { warn(text); });
  return memory;
}

void Trainer::State::build_optimizer() {
  named_params = optimized_params();
  const auto& named = named_params;
  for (auto& [n, p] : named) params.push_back(p);
  if (dp_style == parallel::DataParallelStyle::ddp)
    data_parallel = std::make_unique<parallel::DataParallel>(params, (*mesh)[dist::MeshAxis::dp]);
  optimizer = std::make_unique<optim::AdamW>(named, cfg.optimizer.adamw_options());
  scheduler = std::make_unique<optim::LrScheduler>(*optimizer, cfg.lr_scheduler.schedule(cfg.training.steps));
}

void Trainer::State::build_metrics() {
  const JobConfig& c = cfg;
  // Rank 0 measures (ranks measuring at once on shared cores would each see a fraction) and
  // tells the others.
  if (world.rank() == 0) peak = resolve_peak_flops(c.metrics.peak_flops, matmul_dtype(c.training));
  if (world.size() > 1) {
    peak.flops_per_second = world.all_reduce(peak.flops_per_second, dist::ReduceOp::max);
    if (world.rank() != 0) peak.source = "rank 0's";
  }
  // Rank 0 writes metrics.jsonl and save_tb_folder; with save_for_all_ranks every other rank r
  // writes its own figures (its step time, throughput and memory) beside them.
  const int rank = world.rank();
  const bool writes_metrics = rank == 0 || c.metrics.save_for_all_ranks;
  metrics = std::make_unique<MetricsLogger>(
      MetricsOptions{
          .dump_folder = c.job.dump_folder,
          .log_freq = c.metrics.log_freq,
          .total_steps = c.training.steps,
          .peak_flops = peak.flops_per_second,
          .enable_jsonl = c.metrics.enable_jsonl && writes_metrics,
          .enable_tensorboard = c.metrics.enable_tensorboard && writes_metrics,
          .save_tb_folder = rank == 0 ? c.metrics.save_tb_folder
                                      : c.metrics.save_tb_folder + "/rank_" + std::to_string(rank),
          .jsonl_name = rank == 0 ? "metrics.jsonl" : "metrics_rank" + std::to_string(rank) + ".jsonl",
          .color = use_color(c.metrics.disable_color_printing, console_is_terminal(log)),
          .mode = mode->label(),
          .device_peak_bytes = [this]() -> std::optional<int64_t> {
            return engine ? engine->device_peak_bytes() : std::nullopt;
          }},
      log);
}

void Trainer::State::log_setup() {
  const JobConfig& c = cfg;
  const models::ModelSummary& summary = workload->summary();
  const int64_t dp_size = (*mesh)[dist::MeshAxis::dp].size();
  log << "titan: job \"" << c.job.description << "\", writing to " << c.job.dump_folder << "\n"
      // A family without flavors (hf) builds model.hf_config's model.
      << "titan: model " << c.model.name
      << (models::get_train_spec(c.model.name).flavors.empty() ? " (" + c.model.hf_config + ")"
                                                                 : "/" + c.model.flavor)
      << ": "
      << summary.description << "\n";
  workload->log_model(log, c, mode->checkpointing(c).summary);
  workload->log_data(log, c);
  log << "titan: precision "
      << (matmul_dtype(c.training) == kBF16
              ? "bf16 matrix products (oneDNN " + kernels::cpu::onednn_version() + ", " +
                    kernels::cpu::onednn_bf16_isa() +
                    "), float32 weights, activations, reductions and optimizer"
              : "float32 (OpenBLAS " + kernels::cpu::blas_corename() + ")")
      << "\n"
      << "titan: batch " << c.training.local_batch_size << " x " << plan.gradient_accumulation_steps
      << " micro-batches"
      << (devices_fed() > 1 ? " per data-parallel device (" + std::to_string(devices_fed()) + " of them)" : "")
      << ", " << num_threads() << " threads, peak " << peak.flops_per_second / 1e9
      << " GFLOP/s (" << peak.source << ")\n";
  if (const std::string w = kernels::cpu::blas_kernel_warning(); !w.empty() && world.rank() == 0) warn(w);
  if (data_parallel)
    log << "titan: " << world.size() << " ranks, mesh dp_replicate " << mesh->degree(dist::MeshAxis::dp_replicate)
        << ": data parallel with replicated parameters (DDP), gradients averaged over " << dp_size
        << " ranks in " << data_parallel->num_buckets()
        << (data_parallel->num_buckets() == 1 ? " bucket" : " buckets") << " after backward; global batch "
        << plan.global_batch_size << "\n";
  if (const parallel::FullyShard* fsdp = plans.fsdp.get())
    log << "titan: " << world.size() << " ranks, mesh dp_replicate " << mesh->degree(dist::MeshAxis::dp_replicate)
        << " x dp_shard " << mesh->degree(dist::MeshAxis::dp_shard) << ": " << parallel::style_name(dp_style)
        << ", parameters, gradients and optimizer "
        << "states sharded over " << mesh->degree(dist::MeshAxis::dp_shard) << " ranks (" << fsdp->shard_bytes() / 1e6
        << " MB of parameters on this rank); global batch " << plan.global_batch_size << "\n";
  workload->log_layout(log, c, *mesh, plans);
}

Trainer::Trainer(JobConfig cfg, std::ostream& log, dist::ProcessGroup world, MakeEngine objective_engine)
    : state_(std::make_unique<State>(std::move(cfg), log, std::move(world))) {
  State& s = *state_;
  const JobConfig& c = s.cfg;
  validate(c);
  TITAN_CHECK(static_cast<bool>(objective_engine) == (c.training.objective == "grpo"),
              "Trainer: training.objective = \"", c.training.objective, "\" ",
              objective_engine ? "has its step in train/; pass no objective engine"
                               : "needs its engine (rl::objective_engine), which was not passed");
  const dist::MeshDegrees degrees = dist::MeshDegrees::from_config(c.parallelism);
  // First: a family refuses by key what it does not run, before the general checks.
  s.workload = make_workload(c, std::move(objective_engine));
  refuse_unsupported(c, degrees);
  s.mode = make_execution_mode(c);
  s.lay_out(degrees);
  s.workload->build_data(s.context());
  s.build_model();
  s.plan_memory(s.mode->memory_plan_scope(s.world.rank(), s.world.size()));
  s.initialise();
  s.build_optimizer();
  s.build_metrics();
  s.log_setup();
  s.workload->make_validator(s.context());
  s.checkpointer = std::make_unique<CheckpointManager>(
      c,
      Checkpointed{.model = *s.model,
                   .optimizer = *s.optimizer,
                   .scheduler = *s.scheduler,
                   .loader = s.workload->loader(),
                   .rng = s.rng,
                   .fsdp = s.plans.fsdp.get(),
                   .slices = s.slice_plans(),
                   .pp = s.plans.pp.get(),
                   .replica_writer = s.mesh->coordinate(dist::MeshAxis::dp_replicate) == 0 &&
                                     s.mesh->coordinate(dist::MeshAxis::cp) == 0,
                   .tokenizer_dir = s.workload->tokenizer_dir()},
      s.log, s.world);
  s.start_step = s.checkpointer->load();
  // After the load: a step that keeps the state on a device uploads it as loaded.
  s.engine = s.workload->make_engine(s.engine_parts());
  s.log << "titan: step " << s.engine->describe() << "\n";
  s.profiler = std::make_unique<StepProfiler>(c.profiling, c.job.dump_folder, s.world.rank(), s.log);
  // Replicas start identical whatever each rank initialised or loaded.
  if (s.data_parallel) s.data_parallel->broadcast_parameters();
}

Trainer::~Trainer() = default;

TrainResult Trainer::train() {
  State& s = *state_;
  const JobConfig& c = s.cfg;
  TrainResult result;
  result.steps_run = result.resumed_from = s.start_step;
  CpuAllocator::instance().reset_peak();
  const int64_t accum = s.plan.gradient_accumulation_steps;
  // Per device (train/workload.h).
  const int64_t batch_tokens = s.workload->tokens_per_step(c, s.dims, accum);
  // Steps and validation multiply in the configured precision (core/autocast.h).
  const AutocastGuard precision(matmul_dtype(c.training));
  const NextBatch next_batch = s.workload->next_batch();
  for (int64_t step = s.start_step + 1; step <= c.training.steps; ++step) {
    s.profiler->begin_step(step);
    auto t0 = std::chrono::steady_clock::now();
    double lr = s.optimizer->lr();
    StepStats stats =
        s.memory_snapshots->run_step(step, [&] { return s.engine->step(accum, next_batch); });
    s.scheduler->step();
    double loss_mean = stats.loss, grad_norm = stats.grad_norm;
    // The loss and the model's figures of the global batch: every data-parallel rank saw an equal
    // share of it. Extremes ("..._min", "..._max") combine as
    // such, the rest as means. So did every cp rank of its tokens. Pipeline stages hold the figures
    // of their own layers (the loss is already the step's on every stage).
    for (const dist::MeshAxis axis : {dist::MeshAxis::dp, dist::MeshAxis::cp, dist::MeshAxis::pp}) {
      dist::ProcessGroup& group = (*s.mesh)[axis];
      if (group.size() == 1) continue;
      if (axis != dist::MeshAxis::pp) loss_mean = group.all_reduce(loss_mean, dist::ReduceOp::avg);
      for (auto& [name, value] : stats.extra) {
        if (name.ends_with("_max"))
          value = group.all_reduce(value, dist::ReduceOp::max);
        else if (name.ends_with("_min"))
          value = -group.all_reduce(-value, dist::ReduceOp::max);
        else
          value = group.all_reduce(value, dist::ReduceOp::avg);
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    TITAN_CHECK(std::isfinite(loss_mean), "training: loss became ", loss_mean, " at step ", step,
                "; lower optimizer.lr or raise lr_scheduler.warmup_steps");
    result.losses.push_back(loss_mean);
    result.grad_norms.push_back(grad_norm);
    result.steps_run = step;
    std::optional<LoggedMetrics> logged = s.metrics->record({.step = step,
                                                             .loss = loss_mean,
                                                             .grad_norm = grad_norm,
                                                             .lr = lr,
                                                             .tokens = stats.tokens > 0 ? stats.tokens : batch_tokens,
                                                             .step_seconds = seconds,
                                                             .flops_per_token = s.workload->summary().flops_per_token,
                                                             .extra = stats.extra});
    if (logged && logged->mfu_percent > 100.0 && !s.warned_peak) {
      // A peak measured while the machine was busy is too low, and stays cached.
      s.warn("MFU above 100% means the peak FLOP/s figure (" + s.peak.source +
             ") is too low, probably measured while the machine was busy; delete that cache file or set "
             "metrics.peak_flops");
      s.warned_peak = true;
    }
    // A signal may reach some ranks a step before others; all stop after the same step.
    bool stop = StopOnSignal::requested();
    if (s.world.size() > 1) stop = s.world.all_reduce(stop ? 1.0 : 0.0, dist::ReduceOp::max) > 0;
    // What reads the model's and the optimizer's host tensors next finds them up to date. A save
    // is due on every rank alike, and bringing a graph run's tensors to the host is collective
    // over its processes.
    const bool validates = s.workload->should_validate(step, c.training.steps);
    if (validates || s.checkpointer->due_after(step, stop)) s.engine->to_host();
    if (validates) {
      result.validations.push_back(
          s.workload->validate(step, s.plans));
      s.metrics->record_validation(result.validations.back());
    }
    s.memory_snapshots->after_step(step);
    s.checkpointer->after_step(step, stop);
    s.profiler->end_step([&] { s.checkpointer->wait(); });
    if (stop && step < c.training.steps) {
      s.log << "titan: stop requested; stopped cleanly after step " << step << "\n";
      result.interrupted = true;
      break;
    }
  }
  s.engine->to_host();
  s.checkpointer->wait();
  // Rank 0 alone writes checkpoints: no rank returns before they are on disk, so that a run
  // started next (a resume) finds them on every rank.
  if (s.world.size() > 1) s.world.barrier().wait();
  return result;
}

DryRunReport dry_run(const JobConfig& cfg, int world_size, int rank, std::ostream& log,
                     DryRunOptions options) {
  validate(cfg);
  Trainer::State s(cfg, log, dist::ProcessGroup::simulated(rank, world_size));
  const JobConfig& c = s.cfg;
  // The layout of the ranks, as eager mode lays it out: what a rank of it builds and holds.
  const dist::MeshDegrees degrees = dist::MeshDegrees::from_config(c.parallelism);
  s.workload = make_workload(c, nullptr);
  s.mode = make_eager_mode();
  s.lay_out(degrees);
  // No data is read.
  s.build_model();
  log << "titan: dry run of rank " << rank << " of " << world_size << " (" << s.dims.describe() << "), model "
      << c.model.name << "/" << c.model.flavor << ": " << s.workload->summary().num_params / 1e9
      << " B parameters, whose float32 values alone would take "
      << 4.0 * static_cast<double>(s.workload->summary().num_params) / (1 << 30) << " GiB on one rank\n";
  DryRunReport r{.world_size = world_size,
                 .rank = rank,
                 .plan = s.plan_memory(s.mode->memory_plan_scope(rank, world_size))};
  if (options.initialise) {
    CpuAllocator::instance().reset_peak();
    const int64_t before = CpuAllocator::instance().stats().allocated_bytes;
    s.initialise();
    s.build_optimizer();
    r.startup_peak_bytes = CpuAllocator::instance().stats().peak_allocated_bytes - before;
  }
  return r;
}

void print_pipeline_schedule(const JobConfig& cfg, std::ostream& out) {
  validate(cfg);
  const dist::ParallelismConfig& p = cfg.parallelism;
  // Training's checks of the layout and of the model, so that no schedule is shown for a job that
  // would not run; the ranks are the fewest the degrees need (data_parallel_shard_degree -1: 1).
  const dist::MeshDegrees degrees = dist::MeshDegrees::from_config(p);
  refuse_unsupported(cfg, degrees);
  const dist::ParallelDims dims(degrees);
  const models::TrainSpec& spec = models::get_train_spec(cfg.model.name);
  const models::ModelSummary summary = spec.summarize(cfg.model, cfg.training.seq_len);
  check_model_layout(cfg, dims, spec, summary);
  const parallel::PipelineLayout layout =
      parallel::pipeline_layout(p.pipeline_parallel_schedule, dims.degree(dist::MeshAxis::pp),
                                cfg.training.local_batch_size / p.pipeline_parallel_microbatch_size,
                                summary.n_layers, split_list(p.pipeline_parallel_split_points));
  out << "titan: " << parallel::describe_schedule(layout.schedule) << "\n"
      << parallel::format_schedule(layout.schedule);
}

}  // namespace titan::train
